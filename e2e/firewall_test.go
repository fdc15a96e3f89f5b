//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/spec"
	"github.com/labcluster/gpucluster/internal/testkit/vcluster"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// The master's firewall in TestCluster: the real firewalld and fail2ban (Debian 12's 1.3.3 and
// 1.0.2; Rocky 9 ships firewalld 1.3 and EPEL fail2ban 1.0.2) run in the master's namespaces with
// the image's configuration: the rendered /etc/firewalld/zones/trusted.xml (the lab's subnet bound
// to the trusted zone), the login layer's /etc/fail2ban/jail.d/50-sshd.local and its rp_filter
// sysctl file, unchanged; the zones and jails they build on are the packages' own. The master
// gets a second interface, campus0, to a namespace standing for the campus network. What only a
// real master has, the harness stands in for: a system bus of the master's own (dbus-daemon;
// Rocky 9 runs dbus-broker, the same protocol), the master's own journald (NodeFiles.Journal), and
// the units' command lines (below) instead of systemd.

// campusNet is the network on the master's second interface: the master is .1, a client from
// outside is .10 (it gets banned) and .11 (it does not).
var (
	campusMaster = netip.MustParsePrefix("192.0.2.1/24")
	campusBanned = netip.MustParseAddr("192.0.2.10")
	campusOther  = netip.MustParseAddr("192.0.2.11")
	// spoofedLab is a lab address an outside machine claims on the campus side.
	spoofedLab = netip.MustParseAddr("10.80.0.250")
)

// nfsPort is the NFS server's port; the cluster's NFS is a bind-mount stand-in (TestNFSLive runs
// the real server), so the test listens there on the master itself.
const nfsPort = 2049

// loginLayerFiles are the login layer's files (the master's image), to be given to the master.
func loginLayerFiles(t *testing.T) []vcluster.File {
	t.Helper()
	l, err := spec.LoadLayer(filepath.Join("..", "layers", "login.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var files []vcluster.File
	for _, f := range l.Files {
		b, err := f.Data()
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, vcluster.File{Path: f.Path, Mode: 0o644, Data: b})
	}
	return files
}

// masterFirewall starts the master's firewall as its boot would and checks the policy: from the
// lab everything reaches the master (slurmctld, NFS, chrony, ssh, Prometheus), from outside only
// ssh does (the default zone is the login layer's); a packet claiming a lab address on the
// campus side is dropped (rp_filter); an outside address that keeps failing ssh logins is banned
// by fail2ban through firewalld, another one is not.
// Slurm, chrony and ssh in the rest of TestCluster then run with the firewall up.
func masterFirewall(ctx context.Context, t *testing.T, c *vcluster.Cluster) {
	start := time.Now()
	master := c.Node("master")
	outside := campus(ctx, t, master)
	camp := campusMaster.Addr()
	// The control: without the firewall the campus side reaches slurmctld.
	if got := probeTCP(outside, campusOther, netip.AddrPortFrom(camp, 6817)); got != "open" {
		t.Fatalf("slurmctld from outside before the firewall: %s, want open", got)
	}
	startFirewall(ctx, t, master)
	t.Logf("firewalld, sshd and fail2ban up on the master: %s", time.Since(start).Round(100*time.Millisecond))
	if out, err := master.Run(ctx, "firewall-cmd", "--get-active-zones"); err != nil || !strings.Contains(string(out), "sources: 10.80.0.0/24") {
		t.Fatalf("firewall-cmd --get-active-zones: %v\n%s", err, out)
	} else {
		t.Logf("firewall-cmd --get-active-zones:\n%s", out)
	}
	// The default zone is the login layer's (ssh only), not the package's (Rocky's opens cockpit's
	// 9090, here Prometheus's port).
	if out, err := master.Run(ctx, "firewall-cmd", "--info-zone=public"); err != nil || !strings.Contains(string(out), "services: dhcpv6-client ssh\n") {
		t.Fatalf("firewall-cmd --info-zone=public: %v\n%s", err, out)
	}
	if out, err := master.Run(ctx, "firewall-cmd", "--permanent", "--zone=public", "--get-description"); err != nil || !strings.Contains(string(out), "bootd master") {
		t.Fatalf("the public zone is not the login layer's: %v\n%s", err, out)
	}

	// The NFS server's port, in the master's network namespace.
	var nfs net.Listener
	if err := vlab.InNetns(master.Netns(), func() (err error) {
		nfs, err = net.Listen("tcp", fmt.Sprintf(":%d", nfsPort))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer nfs.Close()
	go func() {
		for {
			conn, err := nfs.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()

	lab, labMaster := c.Node("c1").Netns(), master.Addr.Addr()
	for _, p := range []struct {
		name, netns string
		from        netip.Addr // zero: the namespace's own address
		to          netip.AddrPort
		want        string
	}{
		{"lab: slurmctld", lab, netip.Addr{}, netip.AddrPortFrom(labMaster, 6817), "open"},
		{"lab: NFS", lab, netip.Addr{}, netip.AddrPortFrom(labMaster, nfsPort), "open"},
		{"lab: ssh", lab, netip.Addr{}, netip.AddrPortFrom(labMaster, 22), "open"},
		{"lab: chrony (NTP)", lab, netip.Addr{}, netip.AddrPortFrom(labMaster, 123), "ntp"},
		{"lab: Prometheus", lab, netip.Addr{}, netip.AddrPortFrom(labMaster, 9090), "open"},
		{"outside: ssh", outside, campusOther, netip.AddrPortFrom(camp, 22), "open"},
		{"outside: slurmctld", outside, campusOther, netip.AddrPortFrom(camp, 6817), "prohibited"},
		{"outside: NFS", outside, campusOther, netip.AddrPortFrom(camp, nfsPort), "prohibited"},
		{"outside: chrony (NTP)", outside, campusOther, netip.AddrPortFrom(camp, 123), "prohibited"},
		{"outside: Prometheus", outside, campusOther, netip.AddrPortFrom(camp, 9090), "prohibited"},
	} {
		var got string
		if p.to.Port() == 123 {
			got = probeNTP(p.netns, p.from, p.to)
		} else {
			got = probeTCP(p.netns, p.from, p.to)
		}
		if got != p.want {
			t.Errorf("%s (%s): %s, want %s", p.name, p.to, got, p.want)
		} else {
			t.Logf("%s (%s): %s", p.name, p.to, got)
		}
	}

	t.Run("rp_filter", func(t *testing.T) { spoofedLabSource(ctx, t, master, outside) })
	t.Run("fail2ban bans through firewalld", func(t *testing.T) { banAfterFailures(ctx, t, master, outside, lab, c.Node("c1").Addr.Addr()) })
	t.Logf("firewall subtest: %s", time.Since(start).Round(100*time.Millisecond))
}

// campus links the master to a fresh namespace (the campus network): campus0 on the master, eth0
// there with the two outside addresses. The namespace, and with it the link, goes at cleanup.
func campus(ctx context.Context, t *testing.T, master *vcluster.Node) string {
	t.Helper()
	ns := fmt.Sprintf("campus-%d", os.Getpid())
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", ns, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	steps := [][]string{
		{"ip", "-n", master.Netns(), "link", "add", "campus0", "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "-n", master.Netns(), "addr", "add", campusMaster.String(), "dev", "campus0"},
		{"ip", "-n", master.Netns(), "link", "set", "campus0", "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", netip.PrefixFrom(campusBanned, 24).String(), "dev", "eth0"},
		{"ip", "-n", ns, "addr", "add", netip.PrefixFrom(campusOther, 24).String(), "dev", "eth0"},
		{"ip", "-n", ns, "addr", "add", netip.PrefixFrom(spoofedLab, 32).String(), "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if out, err := exec.CommandContext(ctx, s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(s, " "), err, out)
		}
	}
	return ns
}

// startFirewall starts, in the order of the master's boot, what its firewall needs: the sysctl
// files (systemd-sysctl), the system bus, firewalld, sshd and fail2ban, each with its unit's
// command line (Rocky 9's), each waited for as systemd would (Type=dbus, notify, simple+ping).
func startFirewall(ctx context.Context, t *testing.T, master *vcluster.Node) {
	t.Helper()
	run := func(args ...string) {
		t.Helper()
		if out, err := master.Run(ctx, args...); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// systemd-sysctl.service applies /etc/sysctl.d at boot; net.* settings are the namespace's.
	run("sysctl", "-q", "-p", "/etc/sysctl.d/50-lab-rp_filter.conf")
	run("mkdir", "-p", "/run/dbus", "/run/sshd", "/run/fail2ban")
	start := func(name string, ready []string, argv ...string) {
		t.Helper()
		if err := master.StartDaemon(ctx, name, argv...); err != nil {
			t.Fatal(err)
		}
		var out []byte
		var err error
		for i := 0; i < 120; i++ {
			if out, err = master.Run(ctx, ready...); err == nil {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Fatalf("%s not ready (%s: %v):\n%s\n%s", name, strings.Join(ready, " "), err, out, vlab.TailFile(master.LogPath(name), 20))
	}
	start("dbus", []string{"test", "-S", "/run/dbus/system_bus_socket"}, "dbus-daemon", "--system", "--nofork", "--nopidfile")
	// firewalld.service: ExecStart=/usr/sbin/firewalld --nofork --nopid $FIREWALLD_ARGS.
	start("firewalld", []string{"firewall-cmd", "--state"}, "firewalld", "--nofork", "--nopid")
	// sshd.service: ExecStart=/usr/sbin/sshd -D $OPTIONS; it logs through syslog to the journal.
	start("sshd", []string{"sh", "-c", "ss -Hltn sport = :22 | grep -q ."}, "/usr/sbin/sshd", "-D")
	// fail2ban.service: ExecStart=/usr/bin/fail2ban-server -xf start.
	start("fail2ban", []string{"fail2ban-client", "status", "sshd"}, "fail2ban-server", "-xf", "start")
}

// probeTCP connects from netns (from the address from, unless zero) to to and says how it went:
// open, refused (a TCP reset or ICMP port unreachable), prohibited (ICMP administratively
// prohibited: firewalld's default reject), or timeout.
func probeTCP(netns string, from netip.Addr, to netip.AddrPort) string {
	var conn net.Conn
	var timeout net.Error
	err := vlab.InNetns(netns, func() (err error) {
		d := net.Dialer{Timeout: 3 * time.Second}
		if from.IsValid() {
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(from, 0))
		}
		conn, err = d.Dial("tcp", to.String())
		return err
	})
	switch {
	case err == nil:
		conn.Close()
		return "open"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "prohibited"
	case errors.As(err, &timeout) && timeout.Timeout():
		return "timeout"
	}
	return err.Error()
}

// probeNTP sends one NTP client request (version 4, mode 3) from netns and says "ntp" when a
// server reply (mode 4) comes back, "prohibited" when an ICMP administratively prohibited does
// (firewalld's reject: chronyd itself ignores a client its allow lines do not name), "no answer"
// otherwise.
func probeNTP(netns string, from netip.Addr, to netip.AddrPort) string {
	var conn *net.UDPConn
	err := vlab.InNetns(netns, func() (err error) {
		var laddr *net.UDPAddr
		if from.IsValid() {
			laddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0))
		}
		conn, err = net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(to))
		return err
	})
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	req := make([]byte, 48)
	req[0] = 4<<3 | 3
	if _, err := conn.Write(req); err != nil {
		return err.Error()
	}
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	reply := make([]byte, 128)
	n, err := conn.Read(reply)
	switch {
	case err == nil && n >= 48 && reply[0]&7 == 4:
		return "ntp"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "prohibited"
	}
	return "no answer"
}

// spoofedLabSource connects to the master's campus address from a lab address claimed on the
// campus side: the trusted zone would take it by its source, so strict reverse-path filtering
// (the login layer's sysctl) must drop it, which the master's IPReversePathFilter counter shows.
func spoofedLabSource(ctx context.Context, t *testing.T, master *vcluster.Node, outside string) {
	before := rpFilterDrops(ctx, t, master)
	got := probeTCP(outside, spoofedLab, netip.AddrPortFrom(campusMaster.Addr(), 22))
	after := rpFilterDrops(ctx, t, master)
	if got != "timeout" || after <= before {
		t.Fatalf("ssh from %s on the campus side: %s, IPReversePathFilter %d -> %d; want a timeout and a drop", spoofedLab, got, before, after)
	}
	t.Logf("ssh from %s (a lab address) on the campus side: %s, dropped by rp_filter (IPReversePathFilter %d -> %d)", spoofedLab, got, before, after)
}

// rpFilterDrops is the master's TcpExt IPReversePathFilter counter.
func rpFilterDrops(ctx context.Context, t *testing.T, master *vcluster.Node) int {
	t.Helper()
	out, err := master.Run(ctx, "cat", "/proc/net/netstat")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(out), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(names) != len(values) {
			continue
		}
		for j, name := range names {
			if name == "IPReversePathFilter" {
				v, err := strconv.Atoi(values[j])
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
	}
	t.Fatalf("no TcpExt IPReversePathFilter in the master's /proc/net/netstat:\n%s", out)
	return 0
}

// banAfterFailures fails ssh logins from one outside address until fail2ban bans it (its jail:
// 5 failures), then checks the ban: that address meets firewalld's rich rule on port 22, another
// outside address and the lab still reach sshd, the lab even with its address banned.
func banAfterFailures(ctx context.Context, t *testing.T, master *vcluster.Node, outside, lab string, c1Addr netip.Addr) {
	ssh := func(from netip.Addr) string {
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", outside, "ssh", "-F", "/dev/null", "-b", from.String(),
			"-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
			"-o", "GlobalKnownHostsFile=/dev/null", "-o", "ConnectTimeout=5", "nosuchuser@"+campusMaster.Addr().String(), "true")
		out, _ := cmd.CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	banned := func() bool {
		out, err := master.Run(ctx, "fail2ban-client", "status", "sshd")
		return err == nil && strings.Contains(string(out), campusBanned.String())
	}
	start := time.Now()
	tries := 0
	for ; tries < 12 && !banned(); tries++ {
		if out := ssh(campusBanned); !strings.Contains(out, "Permission denied") && tries < 5 {
			t.Fatalf("ssh attempt %d from %s did not reach sshd: %s", tries+1, campusBanned, out)
		}
		if tries >= 5 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if !banned() {
		out, _ := master.Run(ctx, "fail2ban-client", "status", "sshd")
		journal, _ := master.Run(ctx, "journalctl", "--no-pager", "-n", "20")
		t.Fatalf("%s not banned after %d failed logins:\n%s\njournal:\n%s", campusBanned, tries, out, journal)
	}
	t.Logf("fail2ban banned %s after %d failed logins, %s", campusBanned, tries, time.Since(start).Round(100*time.Millisecond))
	rules, err := master.Run(ctx, "firewall-cmd", "--list-rich-rules")
	if err != nil || !strings.Contains(string(rules), `source address="`+campusBanned.String()+`"`) {
		t.Fatalf("firewall-cmd --list-rich-rules has no rule for %s: %v\n%s", campusBanned, err, rules)
	}
	t.Logf("firewalld's rich rules:\n%s", strings.TrimSpace(string(rules)))
	ssh22 := netip.AddrPortFrom(campusMaster.Addr(), 22)
	for _, p := range []struct {
		name, netns string
		from        netip.Addr
		to          netip.AddrPort
		want        string
	}{
		{"banned address", outside, campusBanned, ssh22, "refused"},
		{"another outside address", outside, campusOther, ssh22, "open"},
		{"the lab", lab, netip.Addr{}, netip.AddrPortFrom(master.Addr.Addr(), 22), "open"},
	} {
		if got := probeTCP(p.netns, p.from, p.to); got != p.want {
			t.Errorf("ssh port after the ban, from %s (%s): %s, want %s", p.name, p.from, got, p.want)
		} else {
			t.Logf("ssh port after the ban, from %s: %s", p.name, got)
		}
	}
	if out := ssh(campusOther); !strings.Contains(out, "Permission denied") {
		t.Errorf("ssh from %s after %s's ban: %s, want sshd's answer", campusOther, campusBanned, out)
	}

	// A lab address banned (by hand here) still reaches sshd: bans are rules of the public zone,
	// and the lab's packets go to the trusted zone by their source.
	labAddr := c1Addr.String()
	if out, err := master.Run(ctx, "fail2ban-client", "set", "sshd", "banip", labAddr); err != nil {
		t.Fatalf("fail2ban-client set sshd banip %s: %v\n%s", labAddr, err, out)
	}
	got := probeTCP(lab, netip.Addr{}, netip.AddrPortFrom(master.Addr.Addr(), 22))
	if out, err := master.Run(ctx, "fail2ban-client", "set", "sshd", "unbanip", labAddr); err != nil {
		t.Fatalf("fail2ban-client set sshd unbanip %s: %v\n%s", labAddr, err, out)
	}
	if got != "open" {
		t.Errorf("ssh port from the lab with %s banned: %s, want open (the trusted zone)", labAddr, got)
	} else {
		t.Logf("ssh port from the lab with %s banned: open (its packets are the trusted zone's)", labAddr)
	}
}
