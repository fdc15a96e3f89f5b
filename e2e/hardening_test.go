//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// TestHardening runs bootd in a virtual lab against what a hostile or careless segment does:
// a host squatting on a pool address, 20 assigns at once, garbage DHCP, a DHCP flood that
// exhausts the pool, HTTP and TFTP traversal, huge and slow requests. Each part checks that
// bootd refuses what it must and keeps serving the rest.
func TestHardening(t *testing.T) {
	requirePrereqs(t, "ip", "busybox", "go")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := artifactDir(t)
	lab := newLab(ctx, t, "hard", "10.80.0.1/24")
	b := startBootd(ctx, t, lab, dir)
	defer logTailOnFailure(t, b.Proc.LogPath)
	seg := newSegClient(ctx, t, lab, "seg", "02:5e:00:00:00:01", netip.MustParsePrefix("10.80.0.250/24"))

	// First: it needs 10.80.0.200, the first pool address, still unleased.
	t.Run("arp probe skips a squatted pool address", func(t *testing.T) { squatter(ctx, t, lab, b, dir) })
	t.Run("20 assigns at once", func(t *testing.T) { concurrentAssigns(ctx, t, b, seg) })
	t.Run("dhcp garbage and oversized packets", func(t *testing.T) { dhcpGarbage(ctx, t, b, seg) })
	t.Run("http traversal, huge and slow requests", func(t *testing.T) { hostileHTTP(ctx, t, b, seg) })
	t.Run("tftp traversal and huge requests", func(t *testing.T) { hostileTFTP(ctx, t, lab, b, seg) })
	// Last: it leaves the pool exhausted.
	t.Run("dhcp flood exhausts the pool, nodes still boot", func(t *testing.T) { dhcpFlood(ctx, t, b, seg) })
	if b.Proc.Exited() {
		t.Fatal("bootd exited during the hardening tests")
	}
}

// squatter: a host that took 10.80.0.200 by hand. A PXE client's DISCOVER must get 10.80.0.201,
// and bootd's log must name the squatter's MAC.
func squatter(ctx context.Context, t *testing.T, lab *vlab.Lab, b *vlab.Bootd, dir string) {
	const squatMAC = "52:54:00:5a:00:66"
	addSquatter(ctx, t, lab, "squat", squatMAC, "10.80.0.200")
	pxe, err := lab.AddHost(ctx, "pxe", mustMAC("52:54:00:5a:00:01"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	lease := dhcp(ctx, t, pxe, udhcpcScript(t, dir))
	t.Logf("PXE client's lease with 10.80.0.200 squatted: %s after %s", lease, time.Since(start).Round(time.Millisecond))
	if lease != "10.80.0.201" {
		t.Fatalf("PXE client got %s, want 10.80.0.201 (10.80.0.200 answers ARP)", lease)
	}
	line := squatterLine(t, b, squatMAC, "10.80.0.200")
	if line == "" {
		t.Fatalf("bootd's log does not name the squatter %s at 10.80.0.200", squatMAC)
	}
	t.Logf("bootd logged: %s", line)
	if held, leases := heldBack(ctx, t, b, "10.80.0.200"); !held {
		t.Errorf("10.80.0.200 is not held back: %+v", leases)
	}
	watchedSquatter(ctx, t, lab, b)
}

// watchedSquatter: a host that takes 10.80.0.202 by hand and sends one ARP request from it (a
// ping) is noticed by bootd's ARP watch at once, with no DHCP client asking: logged by MAC and
// held back.
func watchedSquatter(ctx context.Context, t *testing.T, lab *vlab.Lab, b *vlab.Bootd) {
	const squatMAC = "52:54:00:5a:00:67"
	sq := addSquatter(ctx, t, lab, "squat2", squatMAC, "10.80.0.202")
	start := time.Now()
	if out, err := sq.Run(ctx, "busybox", "ping", "-c", "1", "-W", "2", "10.80.0.1"); err != nil {
		t.Fatalf("ping from the squatter: %v %s", err, out)
	}
	for {
		held, leases := heldBack(ctx, t, b, "10.80.0.202")
		if held {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("10.80.0.202 not held back 5 s after a host sent ARP from it: %+v", leases)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if squatterLine(t, b, squatMAC, "10.80.0.202") == "" {
		t.Fatalf("bootd's log does not name the squatter %s at 10.80.0.202", squatMAC)
	}
	t.Logf("a host sending ARP from 10.80.0.202 was held back after %s, no DHCP involved", time.Since(start).Round(time.Millisecond))
}

// addSquatter adds a host with MAC mac that takes addr by hand: no DHCP, and no ARP sent.
func addSquatter(ctx context.Context, t *testing.T, lab *vlab.Lab, name, mac, addr string) *vlab.Host {
	t.Helper()
	sq, err := lab.AddHost(ctx, name, mustMAC(mac))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := sq.Run(ctx, "ip", "addr", "add", addr+"/24", "dev", "eth0"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	return sq
}

// squatterLine is the last line of bootd's log that names mac at addr as ADDRESS IN USE, or "".
func squatterLine(t *testing.T, b *vlab.Bootd, mac, addr string) string {
	t.Helper()
	log, err := os.ReadFile(b.Proc.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, "ADDRESS IN USE") && strings.Contains(l, mac) && strings.Contains(l, addr) {
			line = l
		}
	}
	return line
}

// heldBack reports whether the inventory holds addr back (a declined lease), and its leases.
func heldBack(ctx context.Context, t *testing.T, b *vlab.Bootd, addr string) (bool, []inventory.Lease) {
	t.Helper()
	r, err := b.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(r.Leases, func(l inventory.Lease) bool { return l.Declined && l.Address.String() == addr }), r.Leases
}

// assignResult is one `bootd assign` run.
type assignResult struct {
	name, mac, out string
	err            error
}

// assignAll runs every assign at once through the real CLI.
func assignAll(ctx context.Context, b *vlab.Bootd, reqs [][2]string) []assignResult {
	res := make([]assignResult, len(reqs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, r := range reqs {
		wg.Go(func() {
			<-start
			out, err := b.CLI(ctx, "assign", r[0], "--mac", r[1])
			res[i] = assignResult{name: r[0], mac: r[1], out: strings.TrimSpace(out), err: err}
		})
	}
	close(start)
	wg.Wait()
	return res
}

func concurrentAssigns(ctx context.Context, t *testing.T, b *vlab.Bootd, seg *segClient) {
	macs := make([]string, 40)
	var wg sync.WaitGroup
	errs := make(chan error, len(macs))
	for i := range macs {
		m := seqMAC(0xa5, i)
		macs[i] = m.String()
		wg.Go(func() {
			if _, err := seg.netboot(ctx, m); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	t.Run("distinct names, distinct MACs: all succeed", func(t *testing.T) {
		var reqs [][2]string
		for i := range 20 {
			reqs = append(reqs, [2]string{fmt.Sprintf("c%d", i+1), macs[i]})
		}
		start := time.Now()
		res := assignAll(ctx, b, reqs)
		t.Logf("20 distinct assigns at once: %s", time.Since(start).Round(time.Millisecond))
		for i, r := range res {
			want := fmt.Sprintf("%s is c%d: compute, address 10.80.0.%d", r.mac, i+1, 101+i)
			if r.err != nil || !strings.Contains(r.out, want) {
				t.Errorf("assign %s --mac %s: %v %q, want %q", r.name, r.mac, r.err, r.out, want)
			}
		}
	})
	t.Run("one name, 20 MACs: exactly one wins", func(t *testing.T) {
		var reqs [][2]string
		for i := range 20 {
			reqs = append(reqs, [2]string{"c50", macs[20+i]})
		}
		res := assignAll(ctx, b, reqs)
		var winner string
		for _, r := range res {
			if r.err == nil {
				if winner != "" {
					t.Errorf("c50 assigned twice: to %s and %s", winner, r.mac)
				}
				winner = r.mac
			}
		}
		if winner == "" {
			t.Fatalf("nobody got c50: %+v", res)
		}
		for _, r := range res {
			if r.err == nil {
				continue
			}
			if want := "name c50 is already bound to machine " + winner; !strings.Contains(r.out, want) || !strings.Contains(r.out, "--replace") {
				t.Errorf("refusal for %s: %q, want it to say %q and offer --replace", r.mac, r.out, want)
			}
		}
		t.Logf("c50: won by %s; a refusal: %s", winner, res[slices.IndexFunc(res, func(r assignResult) bool { return r.err != nil })].out)
	})
	t.Run("one MAC, 20 names: exactly one wins", func(t *testing.T) {
		// A machine that lost c50 above still waits.
		r, err := b.Nodes(ctx)
		if err != nil || len(r.Waiting) == 0 {
			t.Fatalf("no machine waiting: %v", err)
		}
		mac := r.Waiting[0].MAC
		var reqs [][2]string
		for i := range 20 {
			reqs = append(reqs, [2]string{fmt.Sprintf("c%d", 60+i), mac})
		}
		res := assignAll(ctx, b, reqs)
		var winner string
		for _, r := range res {
			if r.err == nil {
				if winner != "" {
					t.Errorf("%s assigned twice: as %s and %s", mac, winner, r.name)
				}
				winner = r.name
			}
		}
		if winner == "" {
			t.Fatalf("%s got no name: %+v", mac, res)
		}
		for _, r := range res {
			if r.err == nil {
				continue
			}
			if want := fmt.Sprintf("machine %s is already %s", mac, winner); !strings.Contains(r.out, want) || !strings.Contains(r.out, "bootd unassign "+winner) {
				t.Errorf("refusal for %s: %q, want it to say %q and how to undo it", r.name, r.out, want)
			}
		}
		t.Logf("%s: won by %s; a refusal: %s", mac, winner, res[slices.IndexFunc(res, func(r assignResult) bool { return r.err != nil })].out)
	})
	t.Run("the inventory has no duplicates", func(t *testing.T) {
		r, err := b.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := uniqueInventory(r.Nodes, r.Leases); err != nil {
			t.Fatal(err)
		}
		if len(r.Nodes) != 22 {
			t.Errorf("%d nodes, want 22 (c1..c20, c50, one of c60..c79)", len(r.Nodes))
		}
	})
}

// uniqueInventory checks that no name, MAC or address is held twice among nodes and live leases.
func uniqueInventory(nodes []inventory.Node, leases []inventory.Lease) error {
	names, macs, addrs := map[string]string{}, map[string]string{}, map[netip.Addr]string{}
	for _, n := range nodes {
		if o, ok := names[n.Name]; ok {
			return fmt.Errorf("name %s twice (%s, %s)", n.Name, o, n.MAC)
		}
		if o, ok := macs[n.MAC]; ok {
			return fmt.Errorf("MAC %s is two nodes: %s and %s", n.MAC, o, n.Name)
		}
		if o, ok := addrs[n.Address]; ok {
			return fmt.Errorf("address %s held by %s and node %s", n.Address, o, n.Name)
		}
		names[n.Name], macs[n.MAC], addrs[n.Address] = n.MAC, n.Name, "node "+n.Name
	}
	leaseMACs := map[string]bool{}
	for _, l := range leases {
		if l.Declined {
			continue
		}
		if leaseMACs[l.MAC] {
			return fmt.Errorf("MAC %s holds two leases", l.MAC)
		}
		leaseMACs[l.MAC] = true
		if o, ok := addrs[l.Address]; ok {
			return fmt.Errorf("address %s held by %s and by lease of %s", l.Address, o, l.MAC)
		}
		addrs[l.Address] = "lease of " + l.MAC
	}
	return nil
}

// dhcpGarbage sends what a broken or hostile client might: random bytes of every size up to
// the largest UDP datagram, truncated and corrupted real packets, absurd options. bootd must
// stay up and answer a good client right after.
func dhcpGarbage(ctx context.Context, t *testing.T, b *vlab.Bootd, seg *segClient) {
	good, err := dhcpv4.NewDiscovery(seqMAC(0x6a, 1), pxeClient...)
	if err != nil {
		t.Fatal(err)
	}
	raw := good.ToBytes()
	var pkts [][]byte
	for _, n := range []int{0, 1, 20, 235, 236, 239, 240, 241, 300, 576, 1500, 4095, 4096, 4097, 9000, 65000} {
		p := make([]byte, n)
		_, _ = rand.Read(p)
		pkts = append(pkts, p)
	}
	for n := 0; n < len(raw); n += 7 {
		pkts = append(pkts, raw[:n]) // every truncation
	}
	for range 200 { // bit flips in a real packet, but never in its MAC (hlen, chaddr)
		p := slices.Clone(raw)
		var r [3]byte
		_, _ = rand.Read(r[:])
		at := (int(r[0])<<8 | int(r[1])) % len(p)
		if at == 2 || at >= 28 && at < 44 {
			continue // a flip there is a valid DISCOVER from another MAC: a flood, not garbage
		}
		p[at] ^= r[2] | 1
		pkts = append(pkts, p)
	}
	huge := append(slices.Clone(raw[:len(raw)-1]), bigOptions()...) // options up to 64 KiB
	pkts = append(pkts, huge, append(slices.Clone(raw), make([]byte, 60000)...))
	var sent int
	to := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}
	uni := &net.UDPAddr{IP: seg.server.AsSlice(), Port: dhcpv4.ServerPort}
	for _, p := range pkts {
		for _, dst := range []*net.UDPAddr{to, uni} {
			if _, err := seg.conn.WriteTo(p, dst); err == nil {
				sent++
			}
		}
	}
	t.Logf("sent %d malformed or oversized DHCP packets (0 to 65000 bytes)", sent)
	start := time.Now()
	a, err := seg.dora(ctx, seqMAC(0x6a, 2))
	if err != nil {
		lg, _ := os.ReadFile(b.Proc.LogPath)
		for _, l := range strings.Split(string(lg), "\n") {
			if strings.Contains(l, "02:6a:00:00:00:02") || strings.Contains(l, "level=warn") || strings.Contains(l, "level=error") {
				t.Log("bootd log: " + l)
			}
		}
		t.Fatalf("a good client after the garbage: %v", err)
	}
	t.Logf("a good client's DORA after the garbage: %s in %s", a, time.Since(start).Round(time.Millisecond))
	if b.Proc.Exited() {
		t.Fatal("bootd died")
	}
}

// bigOptions is a run of 255-byte options, then the end option, about 64 KiB in all.
func bigOptions() []byte {
	var o []byte
	for i := 0; len(o) < 64000; i++ {
		o = append(o, byte(224+i%30), 255)
		o = append(o, make([]byte, 255)...)
	}
	return append(o, 255)
}

// dhcpFlood: thousands of DISCOVERs from random MACs exhaust the discovery pool; an assigned
// node still gets its reservation, during the flood and after it.
func dhcpFlood(ctx context.Context, t *testing.T, b *vlab.Bootd, seg *segClient) {
	r, err := b.Nodes(ctx)
	if err != nil || len(r.Nodes) == 0 {
		t.Fatalf("no node to check with: %v", err)
	}
	node := r.Nodes[0]
	logBefore := warnCount(t, b.Proc.LogPath)
	stop := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	floodStart := time.Now()
	for range 4 {
		wg.Go(func() {
			for i := 0; i < 5000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req, err := dhcpv4.NewDiscovery(randomMAC(), pxeClient...)
				if err != nil {
					return
				}
				if _, err := seg.conn.WriteTo(req.ToBytes(), &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}); err == nil {
					sent.Add(1)
				}
				if i%50 == 49 {
					time.Sleep(5 * time.Millisecond) // about 10k packets a second in all
				}
			}
		})
	}
	// Wait until the pool is gone: a new PXE client gets no offer.
	exhausted := false
	for i := 0; i < 60 && !exhausted; i++ {
		time.Sleep(250 * time.Millisecond)
		r, err := b.Nodes(ctx)
		if err != nil {
			continue
		}
		live := 0
		for _, l := range r.Leases {
			if l.Expires.After(time.Now()) {
				live++
			}
		}
		exhausted = live >= 50
	}
	if !exhausted {
		close(stop)
		wg.Wait()
		t.Fatalf("the pool was not exhausted after %d DISCOVERs", sent.Load())
	}
	t.Logf("pool exhausted %s into the flood (%d DISCOVERs sent)", time.Since(floodStart).Round(time.Millisecond), sent.Load())
	var during []time.Duration
	for range 5 {
		start := time.Now()
		a, err := seg.dora(ctx, mustMAC(node.MAC))
		if err != nil || a != node.Address {
			close(stop)
			wg.Wait()
			t.Fatalf("node %s (%s) during the flood: %v, %v; want its reservation %s", node.Name, node.MAC, a, err, node.Address)
		}
		during = append(during, time.Since(start).Round(time.Millisecond))
	}
	close(stop)
	wg.Wait()
	floodEnd := time.Now()
	t.Logf("flood: %d DISCOVERs from random MACs in %s; node %s's DORA during the flood: %v", sent.Load(), time.Since(floodStart).Round(time.Millisecond), node.Name, during)
	if _, err := seg.discover(ctx, randomMAC(), 500*time.Millisecond, 2); err == nil {
		t.Error("a new PXE client got an offer from an exhausted pool")
	}
	if a, err := seg.dora(ctx, mustMAC(node.MAC)); err != nil || a != node.Address {
		t.Fatalf("node %s after the flood: %v, %v; want %s", node.Name, a, err, node.Address)
	}
	newMachineAfterFlood(ctx, t, seg, floodEnd)
	r, err = b.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uniqueInventory(r.Nodes, r.Leases); err != nil {
		t.Fatal(err)
	}
	t.Logf("bootd logged %d warnings or errors during the flood", warnCount(t, b.Proc.LogPath)-logBefore)
}

// newMachineAfterFlood: the flood's MACs only DISCOVERed, so their offers lapse after bootd's
// offer hold (10 s), not a lease time: a new unknown machine gets a lease soon after the flood.
func newMachineAfterFlood(ctx context.Context, t *testing.T, seg *segClient, floodEnd time.Time) {
	const limit = 20 * time.Second
	for {
		a, err := seg.dora(ctx, randomMAC())
		if err == nil {
			t.Logf("a new PXE machine got %s %s after the flood ended", a, time.Since(floodEnd).Round(100*time.Millisecond))
			return
		}
		if time.Since(floodEnd) > limit {
			t.Fatalf("no lease for a new PXE machine %s after the flood ended: %v", limit, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// warnCount is the number of warning and error lines in bootd's log (the e2e bootd logs debug too).
func warnCount(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "level=warning") + strings.Count(string(b), "level=error")
}

// hostileHTTP: traversal, a 1 MiB URL, 100 KiB of headers, a POST body that never comes, and
// 200 slowloris connections sending headers a byte at a time: each refused or cut off, while an
// assigned node gets its boot script and kernel meanwhile.
func hostileHTTP(ctx context.Context, t *testing.T, b *vlab.Bootd, seg *segClient) {
	r, err := b.Nodes(ctx)
	if err != nil || len(r.Nodes) == 0 {
		t.Fatalf("no node: %v", err)
	}
	node := r.Nodes[0]
	if err := seg.addAddr(ctx, node.Address); err != nil {
		t.Fatal(err)
	}
	// bootNode fetches the node's boot script and every file it names, as iPXE would.
	bootNode := func() (time.Duration, int64, error) {
		start := time.Now()
		status, script, err := seg.get(ctx, node.Address, "/ipxe/machine?mac="+strings.ReplaceAll(node.MAC, ":", "-"))
		if err != nil || status != 200 {
			return 0, 0, fmt.Errorf("boot script: HTTP %d %v %.200q", status, err, script)
		}
		var n int64
		for _, m := range regexp.MustCompile(`http://10\.80\.0\.1(/images/\S+)`).FindAllStringSubmatch(script, -1) {
			status, body, err := seg.get(ctx, node.Address, m[1])
			if err != nil || status != 200 {
				return 0, 0, fmt.Errorf("%s: HTTP %d %v", m[1], status, err)
			}
			n += int64(len(body))
		}
		if n == 0 {
			return 0, 0, fmt.Errorf("the boot script names no image file:\n%s", script)
		}
		return time.Since(start), n, nil
	}
	d, n, err := bootNode()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s boot script and files (%d bytes), idle server: %s", node.Name, n, d.Round(time.Millisecond))

	t.Run("traversal", func(t *testing.T) {
		for _, p := range []string{
			"/images/../../etc/passwd", "/images/compute/1/..%2f..%2f..%2fstate%2finventory.json",
			"/images/compute/..%2f..%2fstate/inventory.json", "/ipxe/..%2f..%2f..%2fetc%2fpasswd",
			"/ipxe/%2e%2e/%2e%2e/etc/passwd", "/images/compute/1/manifest.json/../../../../etc/shadow",
			"/images/compute/1/%00", "/..%5c..%5cetc%5cpasswd", "/state/inventory.json", "/bootd.sock",
		} {
			status, body := rawRequest(ctx, t, seg, "GET "+p+" HTTP/1.1\r\nHost: 10.80.0.1\r\nConnection: close\r\n\r\n")
			if status == 200 || strings.Contains(body, "root:") || strings.Contains(body, `"nodes"`) {
				t.Errorf("GET %s: HTTP %d %.100q", p, status, body)
			}
		}
	})
	t.Run("1 MiB URL and 100 KiB of headers are refused", func(t *testing.T) {
		long := "GET /ipxe/machine?mac=" + strings.Repeat("a", 1<<20) + " HTTP/1.1\r\nHost: 10.80.0.1\r\n\r\n"
		if status, _ := rawRequest(ctx, t, seg, long); status != 431 && status != 0 {
			t.Errorf("1 MiB URL: HTTP %d, want 431 or the connection cut", status)
		}
		var h strings.Builder
		h.WriteString("GET /boot.ipxe HTTP/1.1\r\nHost: 10.80.0.1\r\n")
		for i := 0; h.Len() < 100<<10; i++ {
			fmt.Fprintf(&h, "X-Pad-%d: %s\r\n", i, strings.Repeat("b", 1000))
		}
		h.WriteString("\r\n")
		if status, _ := rawRequest(ctx, t, seg, h.String()); status != 431 && status != 0 {
			t.Errorf("100 KiB of headers: HTTP %d, want 431 or the connection cut", status)
		}
	})
	t.Run("slow clients are cut off while a node boots", func(t *testing.T) {
		const slow = 200
		var conns []net.Conn
		for range slow {
			c, err := seg.dial(ctx, netip.Addr{}, 80)
			if err != nil {
				t.Fatalf("slowloris connection %d: %v", len(conns), err)
			}
			conns = append(conns, c)
		}
		// A request whose body never comes, to the one endpoint that reads a body.
		body, err := seg.dial(ctx, netip.Addr{}, 80)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(body, "POST /api/v1/node/hardware HTTP/1.1\r\nHost: 10.80.0.1\r\nContent-Length: 60000\r\n\r\n{")
		start := time.Now()
		closed := make([]time.Duration, len(conns)+1)
		var wg sync.WaitGroup
		for i, c := range append(conns, body) {
			wg.Go(func() {
				defer c.Close()
				if c != body {
					_, _ = io.WriteString(c, "GET /boot.ipxe HTTP/1.1\r\n")
				}
				hdr := "X-Slow: " + strings.Repeat("s", 200) + "\r\n"
				for j := 0; time.Since(start) < 90*time.Second; j++ {
					if c != body {
						if _, err := c.Write([]byte{hdr[j%len(hdr)]}); err != nil {
							break
						}
					} else if _, err := c.Write([]byte{' '}); err != nil {
						break
					}
					_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
					var one [512]byte
					if _, err := c.Read(one[:]); err != nil && !isTimeout(err) {
						break // the server answered (408, 400) and closed, or reset
					}
				}
				closed[i] = time.Since(start)
			})
		}
		time.Sleep(time.Second)
		var during []time.Duration
		for range 3 {
			d, _, err := bootNode()
			if err != nil {
				t.Errorf("node boot during the slowloris: %v", err)
				break
			}
			during = append(during, d.Round(time.Millisecond))
		}
		wg.Wait()
		slices.Sort(closed[:slow])
		t.Logf("%d slowloris connections (headers a byte per 200 ms): server cut them after %s..%s; the POST whose body never came after %s; node %s boot script + files meanwhile: %v",
			slow, closed[0].Round(100*time.Millisecond), closed[slow-1].Round(100*time.Millisecond), closed[slow].Round(100*time.Millisecond), node.Name, during)
		if closed[slow-1] >= 90*time.Second {
			t.Error("the server held a slowloris connection for 90 s")
		}
		if closed[slow] >= 90*time.Second {
			t.Error("the server held a request whose body never came for 90 s")
		}
	})
	if d, _, err := bootNode(); err != nil {
		t.Errorf("node boot after the hostile requests: %v", err)
	} else {
		t.Logf("node boot after the hostile requests: %s", d.Round(time.Millisecond))
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// rawRequest writes req on a new connection and returns the status of the answer (0 when the
// server closed without one) and the start of its body.
func rawRequest(ctx context.Context, t *testing.T, seg *segClient, req string) (int, string) {
	t.Helper()
	c, err := seg.dial(ctx, netip.Addr{}, 80)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	go func() { _, _ = io.WriteString(c, req) }()
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return 0, ""
	}
	var status int
	fmt.Sscanf(line, "HTTP/1.1 %d", &status)
	rest, _ := io.ReadAll(io.LimitReader(br, 4096))
	return status, string(rest)
}

// hostileTFTP: traversal and absurd requests get an error or nothing; the ROM's file still comes.
func hostileTFTP(ctx context.Context, t *testing.T, lab *vlab.Lab, b *vlab.Bootd, seg *segClient) {
	local := filepath.Join(t.TempDir(), "fetched")
	fetch := func(name string) (int, error) {
		_ = os.Remove(local)
		if out, err := seg.host.Run(ctx, "busybox", "tftp", "-g", "-r", name, "-l", local, "10.80.0.1"); err != nil {
			return 0, fmt.Errorf("%v: %s", err, strings.TrimSpace(out))
		}
		st, err := os.Stat(local)
		if err != nil {
			return 0, err
		}
		return int(st.Size()), nil
	}
	for _, p := range []string{"../../etc/passwd", "/etc/passwd", "undionly.kpxe/../../../etc/shadow", "..\\..\\etc\\passwd",
		"/var/lib/bootd/inventory.json", "pxelinux.cfg/default", strings.Repeat("a/", 200) + "undionly.kpxe"} {
		if n, err := fetch(p); err == nil {
			t.Errorf("TFTP %q: %d bytes served", p, n)
		} else if !strings.Contains(err.Error(), "file not found") {
			t.Errorf("TFTP %q: %v, want file not found", p, err)
		}
	}
	// Raw requests: an RRQ with a 60 KiB name, one without terminators, a write request, junk.
	var conn *net.UDPConn
	if err := vlab.InNetns(seg.host.Name, func() error {
		var err error
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: seg.ip.AsSlice()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	to := &net.UDPAddr{IP: seg.server.AsSlice(), Port: 69}
	junk := make([]byte, 1000)
	_, _ = rand.Read(junk)
	for _, p := range [][]byte{
		append(append([]byte{0, 1}, strings.Repeat("x", 60000)...), 0, 'o', 'c', 't', 'e', 't', 0),
		append([]byte{0, 1}, strings.Repeat("undionly.kpxe", 100)...),
		append(append([]byte{0, 2}, "undionly.kpxe"...), 0, 'o', 'c', 't', 'e', 't', 0),
		append([]byte{0, 1, 'u', 0, 'o', 'c', 't', 'e', 't', 0}, []byte("blksize\x0099999999999999999999\x00tsize\x00-1\x00")...),
		junk, {}, {0}, {0, 9},
	} {
		_, _ = conn.WriteTo(p, to)
	}
	start := time.Now()
	n, err := fetch("undionly.kpxe")
	if err != nil || n == 0 {
		t.Fatalf("the BIOS loader after hostile TFTP requests: %v, %d bytes", err, n)
	}
	t.Logf("undionly.kpxe (%d bytes) over TFTP after the hostile requests: %s", n, time.Since(start).Round(time.Millisecond))
	if b.Proc.Exited() {
		t.Fatal("bootd died")
	}
}
