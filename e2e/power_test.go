//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/power"
	"github.com/labcluster/gpucluster/internal/testkit/vbmc"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// TestPower: `bootd power` through the running daemon against real BMCs, OpenIPMI's ipmi_sim
// answering IPMI 2.0 over the lab's segment (c1 with its own password, c2 with the default one,
// c4 with one bootd does not have), and Wake-on-LAN for c3, which has no BMC: the magic packet
// for c3's MAC is captured on the segment. Every BMC sees the commands bootd sent, `bootd nodes`
// shows the power, and no password reaches the log.
func TestPower(t *testing.T) {
	requirePrereqs(t, "ip", "ipmi_sim", "ipmitool", "tcpdump")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := artifactDir(t)
	lab := newLab(ctx, t, "pwr", "10.80.0.1/24")
	macs := map[string]string{"c1": "52:54:00:c0:00:01", "c2": "52:54:00:c0:00:02", "c3": "52:54:00:c0:00:03", "c4": "52:54:00:c0:00:04"}

	// One host on the segment holds the BMCs' addresses, an ipmi_sim at each.
	host, err := lab.AddHost(ctx, "bmcs", mustMAC("52:54:00:b0:00:01"))
	if err != nil {
		t.Fatal(err)
	}
	bmcs := map[string]*vbmc.BMC{}
	for _, b := range []struct {
		node, addr, password string
		on                   bool
	}{{"c1", "10.80.0.11", "c1-own", false}, {"c2", "10.80.0.12", "lab-default", true}, {"c4", "10.80.0.14", "not-what-bootd-has", true}} {
		if out, err := host.Run(ctx, "ip", "addr", "add", b.addr+"/24", "dev", "eth0"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		bmcs[b.node], err = vbmc.Start(ctx, host, vbmc.Config{Name: b.node, Dir: filepath.Join(dir, "bmc-"+b.node),
			Addr: netip.AddrPortFrom(netip.MustParseAddr(b.addr), 623), User: "admin", Password: b.password, On: b.on})
		if err != nil {
			t.Fatal(err)
		}
	}

	cfgPath := writeConfig(t, dir, `[bmc]
user = "admin"

[bmc.c1]
address = "10.80.0.11"

[bmc.c2]
address = "10.80.0.12:623"

[bmc.c4]
address = "10.80.0.14"
protocol = "ipmi"
`)
	b := startBootdWithNodes(ctx, t, lab, dir, cfgPath, macs)
	defer logTailOnFailure(t, b.Proc.LogPath)
	for _, p := range []struct{ stdin, args string }{{"lab-default\n", "--default"}, {"c1-own\n", "c1"}, {"a-guess\n", "c4"}} {
		if out, err := b.CLIInput(ctx, p.stdin, "power", "password", p.args); err != nil || !strings.Contains(out, "bootd keeps the BMC password") {
			t.Fatalf("bootd power password %s: %v\n%s", p.args, err, out)
		}
	}

	t.Run("status", func(t *testing.T) {
		seen := len(bmcs["c4"].Requests())
		out, err := b.CLI(ctx, "power", "status", "c[1-4]")
		if exitCode(err) != 1 {
			t.Errorf("exit status %d, want 1: c4's BMC refuses bootd", exitCode(err))
		}
		wantLines(t, out, `c1\s+off\s+ipmi 10\.80\.0\.11\s+-`, `c2\s+on\s+ipmi 10\.80\.0\.12:623\s+-`,
			`c3\s+\?\s+wake-on-lan\s+no BMC to ask`, `c4\s+\?\s+ipmi 10\.80\.0\.14\s+FAILED: .*cannot log in`)
		if asked := bmcs["c4"].Requests()[seen:]; len(asked) != 0 {
			t.Errorf("c4's BMC passed on %q to its chassis with a wrong password", asked)
		}
	})

	t.Run("on: BMC and Wake-on-LAN", func(t *testing.T) {
		capture := captureWakeOnLAN(ctx, t, lab, dir)
		out, err := b.CLI(ctx, "power", "on", "c1,c3")
		if err != nil {
			t.Fatalf("bootd power on c1,c3: %v\n%s", err, out)
		}
		wantLines(t, out, `c1\s+on\s+ipmi 10\.80\.0\.11\s+switched on`, `c3\s+\?\s+wake-on-lan\s+magic packet sent to 52:54:00:c0:00:03`)
		if got := bmcs["c1"].Sets(); !slices.Equal(got, []string{"set power 1"}) {
			t.Errorf("c1's BMC was asked %q, want set power 1", got)
		}
		payload := capture()
		if want := power.MagicPacket(mustMAC(macs["c3"])); !bytes.Equal(payload, want) {
			t.Errorf("captured UDP payload % x\nwant c3's magic packet % x", payload, want)
		}
	})

	t.Run("cycle", func(t *testing.T) {
		if out, err := b.CLI(ctx, "power", "cycle", "c1"); err != nil || !strings.Contains(out, "power cycled") {
			t.Fatalf("bootd power cycle c1: %v\n%s", err, out)
		}
		// ipmi_sim switches on again a second after the off.
		waitFor(ctx, t, 50, "c1's BMC on again after the cycle", func() bool {
			on, _ := bmcs["c1"].Power()
			return on && slices.Equal(bmcs["c1"].Sets(), []string{"set power 1", "set power 0", "set power 1"})
		})
	})

	t.Run("off", func(t *testing.T) {
		out, err := b.CLI(ctx, "power", "off", "c[1-2]")
		if err != nil {
			t.Fatalf("bootd power off c[1-2]: %v\n%s", err, out)
		}
		wantLines(t, out, `c1\s+off\s+ipmi 10\.80\.0\.11\s+switched off`, `c2\s+off\s+ipmi 10\.80\.0\.12:623\s+switched off`)
		if got := bmcs["c2"].Sets(); !slices.Equal(got, []string{"set power 0"}) {
			t.Errorf("c2's BMC was asked %q, want set power 0", got)
		}
		out, err = b.CLI(ctx, "power", "off", "c3")
		if exitCode(err) != 1 || !strings.Contains(out, "c3 has no BMC") {
			t.Errorf("bootd power off c3 (no BMC): exit %d\n%s", exitCode(err), out)
		}
	})

	t.Run("bootd nodes", func(t *testing.T) {
		out, err := b.CLI(ctx, "nodes")
		if err != nil {
			t.Fatal(err)
		}
		wantLines(t, out, `^c1\s.*\sassigned\s+off\s`, `^c3\s.*\sassigned\s+woken\s`, `^c4\s.*\sassigned\s+\?\s`)
		r, err := b.Nodes(ctx)
		if err != nil || r.Power["c2"].State != power.StateOff || r.Power["c2"].BMC != "10.80.0.12:623" {
			t.Fatalf("bootd nodes --json power: %+v, %v", r.Power, err)
		}
	})

	t.Run("errors name what is wrong", func(t *testing.T) {
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"power", "on", "c9"}, "no node called c9"},
			{[]string{"power", "on", "c[1-"}, "'[' without ']'"},
			{[]string{"power", "reboot", "c1"}, "unknown power action"},
		} {
			if out, err := b.CLI(ctx, tt.args...); err == nil || !strings.Contains(out, tt.want) {
				t.Errorf("bootd %s: %v\n%s\nwant an error with %q", strings.Join(tt.args, " "), err, out, tt.want)
			}
		}
	})

	t.Run("passwords kept as secrets, never logged", func(t *testing.T) {
		for _, name := range []string{"_default", "c1", "c4"} {
			fi, err := os.Stat(filepath.Join(b.StateDir, "secrets", "bmc", name))
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("secrets/bmc/%s: %v, mode %v", name, err, fi.Mode().Perm())
			}
		}
		log, err := os.ReadFile(b.Proc.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, pw := range []string{"lab-default", "c1-own", "a-guess"} {
			if bytes.Contains(log, []byte(pw)) {
				t.Errorf("bootd's log holds a BMC password (%s)", pw)
			}
		}
	})
}

// writeConfig writes bootd.toml with the given content into dir.
func writeConfig(t *testing.T, dir, content string) string {
	t.Helper()
	path := filepath.Join(dir, "bootd.toml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startBootdWithNodes builds bootd, writes an inventory in which each named node is assigned to
// its MAC (as `bootd assign` leaves it once each machine netbooted), and starts bootd on it with
// the config file.
func startBootdWithNodes(ctx context.Context, t *testing.T, lab *vlab.Lab, dir, cfgPath string, macs map[string]string) *vlab.Bootd {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	seedInventory(t, filepath.Join(dir, "state"), cfg, macs)
	bin := filepath.Join(dir, "bootd")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/bootd").CombinedOutput(); err != nil {
		t.Fatalf("build bootd: %v\n%s", err, out)
	}
	b, err := lab.StartBootd(ctx, bin, dir, "--config", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// seedInventory assigns each node to its MAC in the inventory under state, before bootd starts.
func seedInventory(t *testing.T, state string, cfg config.Config, macs map[string]string) []inventory.Node {
	t.Helper()
	inv, err := inventory.Open(filepath.Join(state, "inventory.json"))
	if err != nil {
		t.Fatal(err)
	}
	var nodes []inventory.Node
	for _, name := range slices.Sorted(maps.Keys(macs)) {
		p, err := cfg.Place(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := inv.See(macs[name], inventory.Facts{}); err != nil {
			t.Fatal(err)
		}
		a, err := inv.Assign(inventory.AssignRequest{Name: name, Role: p.Role, Address: p.Address, MAC: macs[name]})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, a.Node)
	}
	if err := inv.Compact(); err != nil {
		t.Fatal(err)
	}
	return nodes
}

// captureWakeOnLAN starts tcpdump on a host of the segment for one UDP packet to port 9 and
// returns a function that waits for it and returns its UDP payload.
func captureWakeOnLAN(ctx context.Context, t *testing.T, lab *vlab.Lab, dir string) func() []byte {
	t.Helper()
	h, err := lab.AddHost(ctx, "capture", mustMAC("52:54:00:ca:00:01"))
	if err != nil {
		t.Fatal(err)
	}
	pcap, log := filepath.Join(dir, "wol.pcap"), filepath.Join(dir, "tcpdump.log")
	p, err := h.Start(ctx, log, "tcpdump", "-i", "eth0", "-n", "-U", "-c", "1", "-w", pcap, "udp", "and", "port", "9")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 100, "tcpdump listening", func() bool {
		b, _ := os.ReadFile(log)
		return bytes.Contains(b, []byte("listening on"))
	})
	return func() []byte {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := p.Wait(wctx); err != nil {
			t.Fatalf("tcpdump captured no Wake-on-LAN packet: %v\n%s", err, vlab.TailFile(log, 5))
		}
		data, err := os.ReadFile(pcap)
		if err != nil {
			t.Fatal(err)
		}
		payload, err := udpPayload(data)
		if err != nil {
			t.Fatal(err)
		}
		return payload
	}
}

// udpPayload returns the UDP payload of the first packet of a pcap file of Ethernet frames,
// after checking that the frame went to every port of the segment (broadcast).
func udpPayload(pcap []byte) ([]byte, error) {
	if len(pcap) < 24+16 || binary.LittleEndian.Uint32(pcap[20:24]) != 1 {
		return nil, fmt.Errorf("not a pcap file of Ethernet frames (%d bytes)", len(pcap))
	}
	n := int(binary.LittleEndian.Uint32(pcap[24+8 : 24+12]))
	frame := pcap[40:]
	if len(frame) < n || n < 14+20+8 {
		return nil, fmt.Errorf("short frame (%d bytes)", n)
	}
	frame = frame[:n]
	if !bytes.Equal(frame[:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) || binary.BigEndian.Uint16(frame[12:14]) != 0x0800 {
		return nil, fmt.Errorf("not an IPv4 broadcast frame: % x", frame[:14])
	}
	ip := frame[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[9] != 17 || len(ip) < ihl+8 {
		return nil, fmt.Errorf("not UDP")
	}
	return ip[ihl+8:], nil
}

// wantLines fails unless each pattern matches some line of out.
func wantLines(t *testing.T, out string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		re := regexp.MustCompile(p)
		if !slices.ContainsFunc(strings.Split(out, "\n"), re.MatchString) {
			t.Errorf("no line matches %q in:\n%s", p, out)
		}
	}
}

// waitFor polls ok every 100 ms, up to tries times, and fails naming what it waited for.
func waitFor(ctx context.Context, t *testing.T, tries int, what string, ok func() bool) {
	t.Helper()
	for range tries {
		if ok() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("no %s after %d tries", what, tries)
}

// exitCode is a command's exit status: 0 for no error, -1 when it did not run.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}
