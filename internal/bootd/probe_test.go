package bootd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/inventory"
)

// fakeProber says which addresses answer ARP, and counts probes. Its Watch passes on what is
// sent on arp, after failing watchFails times.
type fakeProber struct {
	mu         sync.Mutex
	taken      map[netip.Addr]net.HardwareAddr
	err        error
	delay      time.Duration
	probed     []netip.Addr
	waits      []time.Duration
	arp        chan sighting
	watchFails int
	reprobes   int // of the probes, those made with Reprobe
}

func (p *fakeProber) Probe(_ context.Context, a netip.Addr, timeout time.Duration) (net.HardwareAddr, error) {
	p.mu.Lock()
	delay := p.delay
	p.mu.Unlock()
	time.Sleep(delay)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probed = append(p.probed, a)
	p.waits = append(p.waits, timeout)
	return p.taken[a], p.err
}

// Reprobe is Probe, counted apart.
func (p *fakeProber) Reprobe(ctx context.Context, a netip.Addr, timeout time.Duration) (net.HardwareAddr, error) {
	p.mu.Lock()
	p.reprobes++
	p.mu.Unlock()
	return p.Probe(ctx, a, timeout)
}

func (p *fakeProber) Sweep(ctx context.Context, addrs []netip.Addr, timeout time.Duration) (map[netip.Addr]net.HardwareAddr, error) {
	found := map[netip.Addr]net.HardwareAddr{}
	for _, a := range addrs {
		if mac, err := p.Probe(ctx, a, timeout); err != nil {
			return nil, err
		} else if mac != nil {
			found[a] = mac
		}
	}
	return found, nil
}

func (p *fakeProber) Watch(ctx context.Context, seen func(netip.Addr, net.HardwareAddr)) error {
	p.mu.Lock()
	fail := p.watchFails > 0
	if fail {
		p.watchFails--
	}
	p.mu.Unlock()
	if fail {
		return errors.New("interface down")
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case x := <-p.arp: // nil (no test traffic): blocks until ctx is done
			seen(x.addr, x.mac)
		}
	}
}

func (p *fakeProber) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.probed)
}

func TestLeaserProbesNewDiscoveryAddresses(t *testing.T) {
	squatter := hw("52:54:00:5a:5a:5a")
	d := testDaemon(t)
	log, hook := test.NewNullLogger()
	d.log = log
	p := &fakeProber{taken: map[netip.Addr]net.HardwareAddr{netip.MustParseAddr("10.80.0.200"): squatter}}
	d.probe = p

	l, ok, err := dora(d, hw("52:54:00:00:00:09"), true)
	if err != nil || !ok || l.IP.String() != "10.80.0.201" {
		t.Fatalf("Lease = %v %v %v; want 10.80.0.201 since 10.80.0.200 answers ARP", l.IP, ok, err)
	}
	var loud *logrus.Entry
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.ErrorLevel && e.Data["squatter_mac"] == squatter.String() {
			loud = e
		}
	}
	if loud == nil || loud.Data["address"] != netip.MustParseAddr("10.80.0.200") {
		t.Fatalf("no error naming the squatter's MAC and address; log: %v", hook.AllEntries())
	}
	held := false
	for _, l := range d.inv.Leases() {
		held = held || (l.Declined && l.Address.String() == "10.80.0.200")
	}
	if !held {
		t.Fatalf("10.80.0.200 not held back: %+v", d.inv.Leases())
	}
	if got := p.count(); got != 2 {
		t.Fatalf("%d probes, want 2 (10.80.0.200 taken, 10.80.0.201 free)", got)
	}

	t.Run("renewals are not probed", func(t *testing.T) {
		if l, _, _ := dora(d, hw("52:54:00:00:00:09"), true); l.IP.String() != "10.80.0.201" || p.count() != 2 {
			t.Fatalf("renewal = %v after %d probes; want 10.80.0.201 and no new probe", l.IP, p.count())
		}
	})
	t.Run("assigned nodes are not probed", func(t *testing.T) {
		if _, _, err := d.inv.See("52:54:00:00:00:04", inventory.Facts{}); err != nil {
			t.Fatal(err)
		}
		if _, err := (controller{d}).Assign(ctl.AssignRequest{Name: "c4", MAC: "52:54:00:00:00:04"}); err != nil {
			t.Fatal(err)
		}
		if l, _, _ := dora(d, hw("52:54:00:00:00:04"), true); l.IP.String() != "10.80.0.104" || p.count() != 2 {
			t.Fatalf("node lease = %v after %d probes; want 10.80.0.104 and no new probe", l.IP, p.count())
		}
	})
	t.Run("a probe that cannot be made fails open", func(t *testing.T) {
		p.err = errors.New("no CAP_NET_RAW")
		defer func() { p.err = nil }()
		if l, ok, err := dora(d, hw("52:54:00:00:00:0b"), true); err != nil || !ok || l.IP.String() != "10.80.0.202" {
			t.Fatalf("Lease = %v %v %v; want 10.80.0.202 unprobed", l.IP, ok, err)
		}
	})
}

func TestLeaserGivesUpAfterMaxProbes(t *testing.T) {
	d := testDaemon(t)
	p := &fakeProber{taken: map[netip.Addr]net.HardwareAddr{}}
	for a := netip.MustParseAddr("10.80.0.200"); a.Compare(netip.MustParseAddr("10.80.0.209")) <= 0; a = a.Next() {
		p.taken[a] = hw(fmt.Sprintf("52:54:00:5a:5a:%02x", a.As4()[3])) // ten hosts, each with its static address
	}
	d.probe = p
	mac := hw("52:54:00:00:00:09")
	if _, _, err := dora(d, mac, true); err == nil {
		t.Fatal("a lease although every address probed answers ARP")
	}
	if p.count() != maxProbes {
		t.Fatalf("%d probes for one request, want %d", p.count(), maxProbes)
	}
	// The next request goes on where the last stopped.
	for range 3 {
		_, _, _ = dora(d, mac, true)
	}
	if l, ok, err := dora(d, mac, true); err != nil || !ok || l.IP.String() != "10.80.0.210" {
		t.Fatalf("Lease = %v %v %v; want 10.80.0.210, the first address nobody answers at", l.IP, ok, err)
	}
}

// A client retransmitting its DISCOVER while its new address is probed waits for the probe; it is
// never offered the address before the probe ends.
func TestLeaserOneProbePerMAC(t *testing.T) {
	d := testDaemon(t)
	p := &fakeProber{taken: map[netip.Addr]net.HardwareAddr{netip.MustParseAddr("10.80.0.200"): hw("52:54:00:5a:5a:5a")}, delay: 50 * time.Millisecond}
	d.probe = p
	var wg sync.WaitGroup
	got := make([]string, 5)
	for i := range got {
		wg.Go(func() {
			l, _, err := leaser{d}.Lease(hw("52:54:00:00:00:09"), true, false)
			got[i] = l.IP.String()
			if err != nil {
				got[i] = err.Error()
			}
		})
	}
	wg.Wait()
	for _, g := range got {
		if g != "10.80.0.201" {
			t.Fatalf("concurrent requests of one MAC got %v, want 10.80.0.201 each (10.80.0.200 is taken)", got)
		}
	}
}
