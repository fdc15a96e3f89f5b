package bootd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/labcluster/gpucluster/internal/dhcpd"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/testkit/testhook"
)

var (
	squatterMAC = hw("52:54:00:5a:5a:5a")
	addr200     = netip.MustParseAddr("10.80.0.200")
)

// scoutDaemon is a daemon whose scout probes through p and logs to the returned hook.
func scoutDaemon(t *testing.T, p *fakeProber) (*daemon, *test.Hook) {
	t.Helper()
	d := testDaemon(t)
	log, hook := test.NewNullLogger()
	d.log = log
	d.probe = p
	d.scout = newScout(d)
	return d, hook
}

func held(d *daemon, a netip.Addr) bool {
	for _, l := range d.inv.Leases() {
		if l.Declined && l.Address == a {
			return true
		}
	}
	return false
}

func loggedSquatter(hook *test.Hook, a netip.Addr, mac net.HardwareAddr) bool {
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.ErrorLevel && e.Data["squatter_mac"] == mac.String() && e.Data["address"] == a {
			return true
		}
	}
	return false
}

// lease looks mac's lease up as a DISCOVER (bind false) or a REQUEST (bind true) does.
func lease(t *testing.T, d *daemon, mac string, bind bool) dhcpd.Lease {
	t.Helper()
	l, ok, err := leaser{d}.Lease(hw(mac), true, bind)
	if err != nil || !ok {
		t.Fatalf("Lease(%s) = %v %v %v", mac, l.IP, ok, err)
	}
	return l
}

// One sweep covers the whole free pool; a squatter it finds is logged and held back, and new
// clients then get vouched addresses with no probe before their OFFER.
func TestScoutSweepsThePool(t *testing.T) {
	p := &fakeProber{taken: map[netip.Addr]net.HardwareAddr{addr200: squatterMAC}}
	d, hook := scoutDaemon(t, p)
	d.scout.round(context.Background())
	if got := p.count(); got != 50 {
		t.Fatalf("the sweep probed %d addresses, want the whole free pool (50)", got)
	}
	if !held(d, addr200) || !loggedSquatter(hook, addr200, squatterMAC) {
		t.Fatalf("squatter found by the sweep: held %v, logged %v", held(d, addr200), loggedSquatter(hook, addr200, squatterMAC))
	}
	if l, _, _ := dora(d, hw("52:54:00:00:00:09"), true); l.IP.String() != "10.80.0.201" {
		t.Fatalf("Lease = %v, want 10.80.0.201", l.IP)
	}
	d.scout.awaitConfirm("52:54:00:00:00:09")
	p.mu.Lock()
	last, reprobes := p.waits[len(p.waits)-1], p.reprobes
	p.mu.Unlock()
	if p.count() != 51 || last != confirmTimeout || reprobes != 1 {
		t.Fatalf("after the lease: %d probes (%d re-probes), the last for %s; want one re-probe of %s", p.count(), reprobes, last, confirmTimeout)
	}
	if d.scout.vouches(netip.MustParseAddr("10.80.0.201")) {
		t.Fatal("the scout still vouches for an address the leaser took")
	}
	// The next round sweeps nothing: every free address is still fresh.
	d.scout.round(context.Background())
	if p.count() != 51 {
		t.Fatalf("a second round right away probed %d more addresses", p.count()-51)
	}
}

// A host that took a vouched address after the sweep, silently, is found by the re-probe while
// the OFFER travels: the REQUEST that follows finds the address gone (and is NAKed), and the
// client's next DISCOVER gets another one.
func TestScoutReprobeTakesTheAddressBack(t *testing.T) {
	p := &fakeProber{taken: map[netip.Addr]net.HardwareAddr{}, delay: 5 * time.Millisecond}
	d, hook := scoutDaemon(t, p)
	d.scout.round(context.Background())
	p.mu.Lock()
	p.taken[addr200] = squatterMAC
	p.mu.Unlock()
	const mac = "52:54:00:00:00:09"
	if l := lease(t, d, mac, false); l.IP != addr200 {
		t.Fatalf("offered %v, want 10.80.0.200 (vouched)", l.IP)
	}
	d.scout.awaitConfirm(mac)
	p.mu.Lock()
	reprobes := p.reprobes
	p.mu.Unlock()
	if reprobes != 1 {
		t.Fatalf("the offered address was re-probed %d times with Reprobe, want once (one packet)", reprobes)
	}
	// The REQUEST comes at once; it waits for the re-probe, and finds no lease left (NAK).
	if l, _, err := (leaser{d}).Lease(hw(mac), true, true); !errors.Is(err, dhcpd.ErrNoLease) {
		t.Fatalf("the REQUEST got %v, %v; want a NAK (ErrNoLease), since a host answers at 10.80.0.200", l.IP, err)
	}
	if !held(d, addr200) || !loggedSquatter(hook, addr200, squatterMAC) {
		t.Fatalf("squatter found by the re-probe: held %v, logged %v", held(d, addr200), loggedSquatter(hook, addr200, squatterMAC))
	}
}

// What the ARP watch sees: a host sending from a free pool address spoils its vouch and is held
// back at once; the address's own lessee is no news; a second host at a leased address is logged,
// once.
func TestScoutWatch(t *testing.T) {
	d, hook := scoutDaemon(t, &fakeProber{taken: map[netip.Addr]net.HardwareAddr{}})
	d.scout.round(context.Background())
	a201 := netip.MustParseAddr("10.80.0.201")
	d.scout.seen(a201, squatterMAC)
	if d.scout.vouches(a201) || !held(d, a201) || !loggedSquatter(hook, a201, squatterMAC) {
		t.Fatalf("a host seen at a free address: vouched %v, held %v, logged %v", d.scout.vouches(a201), held(d, a201), loggedSquatter(hook, a201, squatterMAC))
	}
	client := "52:54:00:00:00:09"
	if l, _, _ := dora(d, hw(client), true); l.IP != addr200 {
		t.Fatalf("Lease = %v, want 10.80.0.200", l.IP)
	}
	hook.Reset()
	d.scout.seen(addr200, hw(client))
	if n := len(hook.AllEntries()); n != 0 {
		t.Fatalf("the lessee's own ARP was logged: %v", hook.AllEntries())
	}
	// The watch's callback queues pool addresses only.
	d.scout.sight(netip.MustParseAddr("10.80.1.5"), squatterMAC)
	if n := len(d.scout.sighted); n != 0 {
		t.Fatalf("an ARP sender outside the pool was queued (%d)", n)
	}
	d.scout.sight(addr200, squatterMAC)
	if x := <-d.scout.sighted; x.addr != addr200 || x.mac.String() != squatterMAC.String() {
		t.Fatalf("queued %v, want %s at %s", x, squatterMAC, addr200)
	}
	for range 3 {
		d.scout.seen(addr200, squatterMAC)
	}
	if n := len(hook.AllEntries()); n != 1 || hook.LastEntry().Data["client_mac"] != client {
		t.Fatalf("a second host at a leased address: %d log lines, want 1 naming the client: %v", n, hook.AllEntries())
	}
}

// The running scout: a watch that fails is started again, and an ARP packet from a free pool
// address, through the watch's queue, gets the address held back and its sender logged.
func TestScoutRunWatchesARP(t *testing.T) {
	testhook.Set(t, &watchRetry, 10*time.Millisecond)
	p := &fakeProber{taken: map[netip.Addr]net.HardwareAddr{}, arp: make(chan sighting), watchFails: 1}
	d, hook := scoutDaemon(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.scout.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	a201 := netip.MustParseAddr("10.80.0.201")
	select {
	case p.arp <- sighting{a201, squatterMAC}: // taken only once the watch runs again (after watchRetry)
	case <-time.After(10 * time.Second):
		t.Fatal("the watch was not started again after it failed")
	}
	// Held back, then logged: wait for the log line.
	for deadline := time.Now().Add(5 * time.Second); !loggedSquatter(hook, a201, squatterMAC); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a host seen at a free pool address is not logged")
		}
	}
	if !held(d, a201) {
		t.Error("the squatter's address is not held back")
	}
	warned := slices.ContainsFunc(hook.AllEntries(), func(e *logrus.Entry) bool {
		return e.Level == logrus.WarnLevel && strings.Contains(e.Message, "cannot be watched")
	})
	if !warned {
		t.Error("the failed watch is not logged")
	}
}

// Many clients at once, scout running: every MAC gets its own address.
func TestScoutConcurrentLeasesDistinct(t *testing.T) {
	d, _ := scoutDaemon(t, &fakeProber{taken: map[netip.Addr]net.HardwareAddr{}, delay: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.scout.round(ctx)
	go d.scout.run(ctx)
	const n = 40
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			l, _, err := dora(d, hw(fmt.Sprintf("52:54:00:00:02:%02x", i)), true)
			got[i] = l.IP.String()
			if err != nil {
				got[i] = err.Error()
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, g := range got {
		if seen[g] {
			t.Fatalf("%s given twice: %v", g, got)
		}
		seen[g] = true
	}
}

// A router doing proxy ARP (one MAC answering for every address) gets at most inventory.MaxHoldsPerMAC
// addresses held back and one error naming it, not the whole pool; and a machine answering at the
// address its own expired lease names is no squatter.
func TestScoutClaims(t *testing.T) {
	proxy := hw("52:54:00:77:77:77")
	p := &fakeProber{taken: map[netip.Addr]net.HardwareAddr{}}
	for a := netip.MustParseAddr("10.80.0.200"); a.Compare(netip.MustParseAddr("10.80.0.249")) <= 0; a = a.Next() {
		p.taken[a] = proxy
	}
	d, hook := scoutDaemon(t, p)
	d.scout.round(context.Background())
	n := 0
	for _, l := range d.inv.Leases() {
		if l.Declined {
			n++
		}
	}
	named := 0
	for _, e := range hook.AllEntries() {
		if e.Data["mac"] == proxy.String() {
			named++
		}
	}
	if n != inventory.MaxHoldsPerMAC || named != 1 {
		t.Fatalf("proxy ARP for 50 addresses: %d held back, %d errors naming it; want %d and 1", n, named, inventory.MaxHoldsPerMAC)
	}

	d2, hook2 := scoutDaemon(t, &fakeProber{taken: map[netip.Addr]net.HardwareAddr{}})
	const mac = "52:54:00:00:00:09"
	pool := inventory.Pool{Start: addr200, End: addr200, LeaseTime: time.Nanosecond}
	if _, _, _, err := d2.inv.OfferLease(mac, pool, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d2.inv.BindLease(mac, pool); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond) // the lease expires; it still names its address
	d2.scout.seen(addr200, hw(mac))
	if held(d2, addr200) || len(hook2.AllEntries()) != 0 {
		t.Fatalf("a machine at its own expired lease's address: held %v, log %v", held(d2, addr200), hook2.AllEntries())
	}
}

// Only a DISCOVER allocates: REQUESTs from made-up MACs take no address. A DISCOVER that waits for
// the lookup of its MAC's REQUEST, which the re-probe left without a lease, still gets an offer.
func TestRequestAllocatesNothing(t *testing.T) {
	p := &fakeProber{taken: map[netip.Addr]net.HardwareAddr{}}
	d, _ := scoutDaemon(t, p)
	d.scout.round(context.Background())
	for i := range 100 {
		if _, _, err := (leaser{d}).Lease(hw(fmt.Sprintf("52:54:00:00:03:%02x", i)), true, true); !errors.Is(err, dhcpd.ErrNoLease) {
			t.Fatalf("REQUEST from a MAC without a lease: %v, want ErrNoLease (NAK)", err)
		}
	}
	if n := len(d.inv.Leases()); n != 0 {
		t.Fatalf("100 REQUESTs without leases left %d leases, want none", n)
	}

	p.mu.Lock()
	p.taken[addr200] = squatterMAC // since the sweep, silent
	p.delay = 50 * time.Millisecond
	p.mu.Unlock()
	const mac = "52:54:00:00:00:09"
	if l := lease(t, d, mac, false); l.IP != addr200 {
		t.Fatalf("offered %v, want 10.80.0.200 (vouched)", l.IP)
	}
	request := make(chan error, 1)
	go func() {
		_, _, err := (leaser{d}).Lease(hw(mac), true, true) // waits for the re-probe
		request <- err
	}()
	waitLocked(t, d, mac) // the REQUEST's lookup is under way (50 ms of re-probe); a retransmitted DISCOVER waits for it
	if l := lease(t, d, mac, false); l.IP == addr200 || !l.IP.IsValid() {
		t.Fatalf("DISCOVER after the REQUEST's lookup: offered %v, want another address than 10.80.0.200", l.IP)
	}
	if err := <-request; !errors.Is(err, dhcpd.ErrNoLease) {
		t.Fatalf("REQUEST for the address the re-probe took back: %v, want ErrNoLease (NAK)", err)
	}
	// The client REQUESTs its new offer, once its re-probe and write are done.
	if l := lease(t, d, mac, true); l.IP == addr200 {
		t.Fatalf("bound %v, which a host answers at", l.IP)
	}
}
