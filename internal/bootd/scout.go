package bootd

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/labcluster/gpucluster/internal/inventory"
)

const (
	// scoutMax bounds the free pool addresses the scout keeps swept: the lowest ones, which new
	// clients get first. A whole lab powered on at once fits in it.
	scoutMax = 1024
	// scoutFresh is how long a sweep that found an address free vouches for it, as long as no
	// ARP packet from the address is seen since; the scout sweeps it again after scoutRefresh, so
	// a free address stays vouched for.
	scoutFresh   = 30 * time.Second
	scoutRefresh = scoutFresh / 2
	// scoutTick is how often the scout looks for addresses to sweep (newly freed ones).
	scoutTick = time.Second
	// sightings is how many ARP senders may wait for the scout; more are dropped (and the
	// sweeps and re-probes still find those hosts).
	sightings = 1024
	// confirmTimeout is the re-probe of a vouched address that runs while its OFFER is on the
	// way; the client's REQUEST waits for it, so no address is ACKed without a probe just before.
	// It catches a host that took the address by hand since the last sweep and has sent no ARP
	// since. Such a host is up on the segment now, and its kernel answers ARP as the request
	// arrives (in softirq, no process to schedule): between namespaces here, 2,000 re-probes with
	// both cores kept busy by four spinning processes were answered in p50 14 µs, p99 52 µs, and
	// none was missed with a window of 250 µs. The one socket's reader hands an answer over at
	// once, and one still queued when the time is up is read before deciding, so a loaded bootd
	// that reads late misses nothing that came in time. 1 ms is 20 times that p99 and stays
	// hidden behind the lease's own durable write, which the ACK waits for anyway; 5 ms, the
	// earlier value, was the longest wait of a new client's DISCOVER-to-ACK (docs/benchmarks-log.md, items 1 and 7).
	confirmTimeout = time.Millisecond
)

// watchRetry is the first wait before watching ARP again after an error; it doubles up to 30
// times that (a variable for tests).
var watchRetry = time.Second

// scout keeps the free discovery addresses probed ahead of time, so a new client's OFFER waits
// for no probe: it sweeps them all with ARP (one sweep every scoutRefresh, arpprobe's two probes per address), and it watches
// every ARP packet on the segment, so a host that starts using a pool address between sweeps is
// noticed the moment it sends one. It only vouches: the inventory still allocates
// (OfferLease, preferring vouched addresses), so an address is never offered to two
// MACs. A host found at a free address is logged and the address held back, as by the leaser's
// own probe.
type scout struct {
	d *daemon

	mu         sync.Mutex
	clean      map[netip.Addr]time.Time // start of the last sweep that found the address free
	taken      map[netip.Addr]time.Time // when the leaser last took the address: older sweeps are void
	confirming map[string]chan struct{} // by MAC: re-probes of offered addresses in flight
	conflicts  map[netip.Addr]time.Time // last "two hosts at one address" error, to log it once per scoutFresh
	warned     bool                     // a sweep failed (logged once)

	sighted chan sighting  // ARP senders at pool addresses, handled off the socket's read path
	pool    inventory.Pool // the discovery pool, fixed for the daemon's life

	// jobs are the scout's goroutines besides run (the watch, its sightings, re-probes). bootd
	// waits for them as it stops (daemon.stop): they log through the daemon's limiters, whose
	// held-back counts it writes next, and write holds to the inventory, which it compacts last.
	jobs sync.WaitGroup
}

type sighting struct {
	addr netip.Addr
	mac  net.HardwareAddr
}

func newScout(d *daemon) *scout {
	return &scout{d: d, clean: map[netip.Addr]time.Time{}, taken: map[netip.Addr]time.Time{},
		confirming: map[string]chan struct{}{}, conflicts: map[netip.Addr]time.Time{},
		sighted: make(chan sighting, sightings), pool: d.pool()}
}

// vouches reports whether a sweep that started within scoutFresh found a free, with no ARP from
// a since. The inventory calls it with its lock held: it takes only the scout's own lock.
func (s *scout) vouches(a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.clean[a]
	return ok && time.Since(t) < scoutFresh
}

// took records that the leaser allocated a: its vouch is used up, and a sweep of it in flight
// counts for nothing.
func (s *scout) took(a netip.Addr) {
	s.mu.Lock()
	delete(s.clean, a)
	s.taken[a] = time.Now()
	s.mu.Unlock()
}

// run sweeps and watches until ctx is done.
func (s *scout) run(ctx context.Context) {
	s.jobs.Go(func() { s.watch(ctx) })
	s.jobs.Go(func() { s.handleSightings(ctx) })
	t := time.NewTicker(scoutTick)
	defer t.Stop()
	for {
		s.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watch feeds every ARP packet's sender to the sightings queue, and starts again after an error
// (the interface went down, say). Meanwhile the sweeps still vouch, and the re-probe before each
// ACK still catches a host that came since.
func (s *scout) watch(ctx context.Context) {
	for wait := watchRetry; ; wait = min(2*wait, 30*watchRetry) {
		err := s.d.probe.Watch(ctx, s.sight)
		if ctx.Err() != nil {
			return
		}
		s.d.log.WithError(err).Warnf("ARP on the segment cannot be watched; trying again in %s (hosts that take a pool address by hand are found by the sweeps and re-probes meanwhile)", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// sight queues one ARP packet's sender for handleSightings when it is at a pool address: the rest
// of the segment's ARP (nodes, the router) is none of the scout's business and must not fill the
// queue. It runs on the socket's read path, so it never blocks.
func (s *scout) sight(a netip.Addr, mac net.HardwareAddr) {
	if !s.pool.Contains(a) {
		return
	}
	select {
	case s.sighted <- sighting{a, mac}:
	default: // a flood of ARP: the sweeps and re-probes still find what is dropped here
	}
}

// handleSightings takes the watch's ARP senders one at a time: holding an address back writes the
// inventory, which must not stall the socket's reader (probes wait on it).
func (s *scout) handleSightings(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case x := <-s.sighted:
			s.seen(x.addr, x.mac)
		}
	}
}

// round sweeps every candidate not found free within scoutRefresh, waits for the sweep, and
// returns how many addresses it swept.
func (s *scout) round(ctx context.Context) int {
	now := time.Now()
	var todo []netip.Addr
	s.mu.Lock()
	for a, t := range s.taken {
		if now.Sub(t) > scoutFresh {
			delete(s.taken, a)
		}
	}
	s.mu.Unlock()
	for _, a := range s.d.inv.FreeAddresses(s.pool, scoutMax) {
		s.mu.Lock()
		t, ok := s.clean[a]
		s.mu.Unlock()
		if !ok || now.Sub(t) >= scoutRefresh {
			todo = append(todo, a)
		}
	}
	if len(todo) > 0 {
		s.sweep(ctx, todo)
	}
	return len(todo)
}

func (s *scout) sweep(ctx context.Context, addrs []netip.Addr) {
	start := time.Now()
	found, err := s.d.probe.Sweep(ctx, addrs, probeTimeout)
	if err != nil || ctx.Err() != nil {
		s.mu.Lock()
		warn := err != nil && ctx.Err() == nil && !s.warned
		s.warned = s.warned || warn
		s.mu.Unlock()
		if warn {
			s.d.log.WithError(err).Warn("discovery addresses cannot be probed ahead; each new client waits for its own probe")
		}
		return
	}
	s.mu.Lock()
	for _, a := range addrs {
		if found[a] != nil {
			delete(s.clean, a)
		} else if start.After(s.taken[a]) {
			s.clean[a] = start
		}
	}
	s.mu.Unlock()
	for a, mac := range found {
		s.squatter(a, mac)
	}
}

// seen is one ARP packet's sender at pool address a: a host that is not the address's holder
// spoils its vouch, and is logged (and the address held back when free).
func (s *scout) seen(a netip.Addr, mac net.HardwareAddr) {
	holder, used := s.d.inv.AddressHolder(a)
	switch {
	case holder == mac.String():
		return
	case !used:
		s.squatter(a, mac) // which leaves mac's own expired lease's address alone
		return
	case s.d.inv.LeasedTo(a, mac.String()):
		return
	}
	s.mu.Lock()
	quiet := time.Since(s.conflicts[a]) < scoutFresh
	if !quiet {
		s.conflicts[a] = time.Now()
	}
	s.mu.Unlock()
	if !quiet && holder != "" {
		s.d.log.WithFields(map[string]any{"address": a, "squatter_mac": mac.String(), "client_mac": holder}).
			Errorf("ADDRESS IN USE TWICE: %s, leased to %s, also answers from %s; find that host and remove its static address, or move the pool", a, holder, mac)
	}
}

// squatter handles a host found at a free pool address: no more vouch, held back (within the
// MAC's share, inventory.MaxHoldsPerMAC), logged. A machine answering at the address its own (expired) lease
// names is no squatter.
func (s *scout) squatter(a netip.Addr, mac net.HardwareAddr) {
	if s.d.inv.LeasedTo(a, mac.String()) {
		return
	}
	s.mu.Lock()
	delete(s.clean, a)
	s.mu.Unlock()
	// Held only if still free: a client that got a meanwhile (and answers at it) is no squatter.
	h, err := s.d.inv.HoldFreeAddress(a, mac.String(), s.d.cfg.Discovery.LeaseTime)
	s.d.heldBack(a, mac, "", h, err)
}

// confirmLater re-probes a, just offered to mac, while the OFFER is on its way. A host found
// there takes the address off mac (held back), so mac's REQUEST for it is NAKed and its next
// DISCOVER gets another.
func (s *scout) confirmLater(mac string, a netip.Addr) {
	done := make(chan struct{})
	s.mu.Lock()
	s.confirming[mac] = done
	s.mu.Unlock()
	s.jobs.Go(func() {
		defer func() {
			s.mu.Lock()
			if s.confirming[mac] == done { // not a newer re-probe's
				delete(s.confirming, mac)
			}
			s.mu.Unlock()
			close(done)
		}()
		squatter, err := s.d.probe.Reprobe(context.Background(), a, confirmTimeout)
		if err != nil {
			s.d.log.WithError(err).WithField("address", a).Warn("offered discovery address not re-probed")
		}
		if squatter == nil || squatter.String() == mac {
			return
		}
		h, err := s.d.inv.HoldAddress(mac, a, squatter.String(), s.d.cfg.Discovery.LeaseTime)
		s.d.heldBack(a, squatter, mac, h, err)
	})
}

// heldBack logs how holding a back on squatter's account (a host found answering ARP at it)
// went: an error writing the hold, the squatter when held, its MAC when over its share. client is
// the client a was offered to ("" for none).
func (d *daemon) heldBack(a netip.Addr, squatter net.HardwareAddr, client string, h inventory.Hold, err error) {
	if err != nil {
		d.log.WithError(err).WithField("address", a).Error("hold back an address in use")
	}
	if h == inventory.Held {
		d.logSquatter(a, squatter, client)
	}
	d.overShare(squatter, a, h)
}

// wait waits for the scout's goroutines, once its run and the DHCP server (which starts
// re-probes) have returned.
func (s *scout) wait() { s.jobs.Wait() }

// awaitConfirm waits for the re-probe of mac's offered address, if one is in flight.
func (s *scout) awaitConfirm(mac string) {
	s.mu.Lock()
	done := s.confirming[mac]
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}
