package bootd

import (
	"context"
	"net/netip"
	"sync"
	"time"
)

const (
	// scoutReady is how many free pool addresses (the lowest ones: those the next new clients
	// get) the scout keeps probed ahead of time: a rack powered on at once.
	scoutReady = 16
	// scoutFresh is how long a probe that found an address free vouches for it; the scout probes
	// it again after scoutRefresh, so a ready address stays ready.
	scoutFresh   = 30 * time.Second
	scoutRefresh = scoutFresh / 2
	// scoutTick is how often the scout looks for addresses to probe when nobody takes any.
	scoutTick = time.Second
	// confirmTimeout is the quick re-check of a vouched address before it is offered. The scout's
	// probe cannot see a host that took the address by hand after that probe (up to scoutFresh
	// ago); such a host is up and on the segment now, and answers ARP in well under a millisecond.
	confirmTimeout = 20 * time.Millisecond
)

// scout probes free discovery addresses ahead of time (ARP, probeTimeout each, concurrently), so
// a new client takes an address probed within scoutFresh instead of waiting for a full probe.
// It only vouches: the inventory still allocates (DiscoveryLeaseFrom, preferring vouched
// addresses), so an address is never offered to two MACs. A host found at a free address is
// logged and the address held back, as by the leaser's own probe.
type scout struct {
	d    *daemon
	kick chan struct{}

	mu      sync.Mutex
	clean   map[netip.Addr]time.Time // start of the last probe that found the address free
	taken   map[netip.Addr]time.Time // when the leaser last took the address: older probes are void
	probing map[netip.Addr]bool
	warned  bool // a probe failed (logged once)
}

func newScout(d *daemon) *scout {
	return &scout{d: d, kick: make(chan struct{}, 1), clean: map[netip.Addr]time.Time{},
		taken: map[netip.Addr]time.Time{}, probing: map[netip.Addr]bool{}}
}

// vouches reports whether a probe that started within scoutFresh found a free. The inventory
// calls it with its lock held: it takes only the scout's own lock.
func (s *scout) vouches(a netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.clean[a]
	return ok && time.Since(t) < scoutFresh
}

// took records that the leaser allocated a: its vouch is used up, a probe of it in flight counts
// for nothing, and the scout gets going on the next address.
func (s *scout) took(a netip.Addr) {
	s.mu.Lock()
	delete(s.clean, a)
	s.taken[a] = time.Now()
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run keeps the lowest scoutReady free addresses probed until ctx is done.
func (s *scout) run(ctx context.Context) {
	t := time.NewTicker(scoutTick)
	defer t.Stop()
	for {
		s.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// round starts a probe of every candidate not probed free within scoutRefresh.
func (s *scout) round(ctx context.Context) {
	cands := s.d.inv.FreeAddresses(s.d.pool(), scoutReady)
	now := time.Now()
	var todo []netip.Addr
	s.mu.Lock()
	for a, t := range s.taken {
		if now.Sub(t) > scoutFresh {
			delete(s.taken, a)
		}
	}
	for _, a := range cands {
		if t, ok := s.clean[a]; s.probing[a] || len(s.probing) >= 2*scoutReady || (ok && now.Sub(t) < scoutRefresh) {
			continue
		}
		s.probing[a] = true
		todo = append(todo, a)
	}
	s.mu.Unlock()
	for _, a := range todo {
		go s.probe(ctx, a)
	}
}

func (s *scout) probe(ctx context.Context, a netip.Addr) {
	defer func() {
		s.mu.Lock()
		delete(s.probing, a)
		s.mu.Unlock()
	}()
	start := time.Now()
	squatter, err := s.d.probe.Probe(ctx, a, probeTimeout)
	s.mu.Lock()
	if err != nil || ctx.Err() != nil {
		warn := err != nil && ctx.Err() == nil && !s.warned
		s.warned = s.warned || warn
		s.mu.Unlock()
		if warn {
			s.d.log.WithError(err).WithField("address", a).Warn("discovery addresses cannot be probed ahead; each new client waits for its own probe")
		}
		return
	}
	if squatter == nil {
		if start.After(s.taken[a]) {
			s.clean[a] = start
		}
		s.mu.Unlock()
		return
	}
	delete(s.clean, a)
	s.mu.Unlock()
	// Held only if still free: a client that got a meanwhile (and answers at it) is no squatter.
	held, err := s.d.inv.HoldFreeAddress(a, s.d.cfg.Discovery.LeaseTime)
	if err != nil {
		s.d.log.WithError(err).WithField("address", a).Error("hold back an address in use")
	}
	if held {
		s.d.logSquatter(a, squatter, "")
	}
}
