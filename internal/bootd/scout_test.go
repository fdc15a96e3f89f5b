package bootd

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

// scoutRound runs one scout round and waits for its probes.
func scoutRound(t *testing.T, s *scout) {
	t.Helper()
	s.round(context.Background())
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		n := len(s.probing)
		s.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("scout probes did not finish")
		}
		time.Sleep(time.Millisecond)
	}
}

// The scout finds a squatter ahead of time (logged, held back) and vouches for the free
// addresses, which new clients then get after a quick re-check only.
func TestScoutProbesAhead(t *testing.T) {
	squatter := hw("52:54:00:5a:5a:5a")
	d := testDaemon(t)
	log, hook := test.NewNullLogger()
	d.log = log
	p := &fakeProber{taken: map[netip.Addr]net.HardwareAddr{netip.MustParseAddr("10.80.0.200"): squatter}}
	d.probe = p
	d.scout = newScout(d)
	scoutRound(t, d.scout)
	if got := p.count(); got != scoutReady {
		t.Fatalf("scout made %d probes, want %d", got, scoutReady)
	}
	held, logged := false, false
	for _, l := range d.inv.Leases() {
		held = held || (l.Declined && l.Address.String() == "10.80.0.200")
	}
	for _, e := range hook.AllEntries() {
		logged = logged || (e.Level == logrus.ErrorLevel && e.Data["squatter_mac"] == squatter.String() && e.Data["address"] == netip.MustParseAddr("10.80.0.200"))
	}
	if !held || !logged {
		t.Fatalf("squatter found by the scout: held %v, logged %v", held, logged)
	}
	// Vouched addresses: a new client gets the lowest, with a quick re-check.
	l, ok, err := leaser{d}.Lease(hw("52:54:00:00:00:09"), true)
	if err != nil || !ok || l.IP.String() != "10.80.0.201" {
		t.Fatalf("Lease = %v %v %v; want 10.80.0.201", l.IP, ok, err)
	}
	p.mu.Lock()
	last := p.waits[len(p.waits)-1]
	p.mu.Unlock()
	if last != confirmTimeout {
		t.Fatalf("vouched address probed for %s, want the quick re-check %s", last, confirmTimeout)
	}
	// A vouch is used once: a probe of the taken address that started before it was taken is void.
	if d.scout.vouches(netip.MustParseAddr("10.80.0.201")) {
		t.Fatal("the scout still vouches for an address the leaser took")
	}
	// A host that took a vouched address since the scout's probe is caught by the re-check.
	p.mu.Lock()
	p.taken[netip.MustParseAddr("10.80.0.202")] = hw("52:54:00:5a:5a:5b")
	p.mu.Unlock()
	if l, _, err := (leaser{d}).Lease(hw("52:54:00:00:00:0a"), true); err != nil || l.IP.String() != "10.80.0.203" {
		t.Fatalf("Lease = %v %v; want 10.80.0.203 (10.80.0.202 taken since the scout's probe)", l.IP, err)
	}
}

// Many clients at once, scout running: every MAC gets its own address.
func TestScoutConcurrentLeasesDistinct(t *testing.T) {
	d := testDaemon(t)
	d.probe = &fakeProber{taken: map[netip.Addr]net.HardwareAddr{}, delay: time.Millisecond}
	d.scout = newScout(d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scoutRound(t, d.scout)
	go d.scout.run(ctx)
	const n = 40
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			l, _, err := leaser{d}.Lease(hw(fmt.Sprintf("52:54:00:00:02:%02x", i)), true)
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
