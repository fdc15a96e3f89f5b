package inventory

import (
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"time"
)

// ErrPoolExhausted is returned when every discovery address is leased or declined.
var ErrPoolExhausted = errors.New("discovery pool exhausted")

// ErrNoLease is what BindLease returns for a MAC that holds no discovery lease.
var ErrNoLease = errors.New("no discovery lease")

// OfferLease returns mac's discovery lease for a DHCP OFFER, renewing it, or allocates one: the
// lowest free address of the pool for which prefer returns true (preferred; e.g. one an ARP probe
// found free moments ago), and only when there is none the lowest free address. prefer (nil: none)
// is called with the store locked; it must not call the store. The allocation itself stays here,
// under the store's lock, so an address is never leased to two MACs, nor one a node holds,
// whatever prefer says. fresh reports a new allocation rather than a renewal: an address the
// caller may want to check on the segment (ARP probe) before offering it, and hold back with
// HoldAddress if it is in use.
//
// An OFFER binds nothing, so the lease is returned at once and written in the background; an
// unanswered offer lapses after the pool's OfferHold. The client's REQUEST (BindLease) waits for
// that write (leaseGen), so no client is ever ACKed a lease that a crash could lose. A failed
// background write removes the allocation, and the REQUEST finds no lease (NAK): its client
// DISCOVERs again, and its address is probed anew.
func (s *Store) OfferLease(mac string, pool Pool, prefer func(netip.Addr) bool) (l Lease, fresh, preferred bool, err error) {
	s.mu.Lock()
	if i := s.ownLease(mac, pool); i >= 0 {
		l, g := s.reoffer(i, pool)
		s.mu.Unlock()
		if g != 0 {
			s.offers.Go(func() { _ = s.commit(g) }) // the BindLease that follows waits for it
		}
		return l, false, false, nil
	}
	now := s.now()
	addr, preferred, err := s.freeAddress(pool, now, prefer)
	if err != nil {
		s.mu.Unlock()
		return Lease{}, false, false, err
	}
	l = Lease{MAC: mac, Address: addr, Expires: now.Add(pool.LeaseTime)}
	s.data.Leases = append(s.prunedFor(mac, addr, now), l)
	s.offered[mac] = now.Add(pool.offerHold())
	g := s.bump()
	s.leaseGen[mac] = g
	s.mu.Unlock()
	s.offers.Go(func() { s.commitAllocation(l, g) }) // the BindLease that follows waits for it
	return l, true, preferred, nil
}

// BindLease renews mac's discovery lease for a DHCP REQUEST and returns it once it is durable. A
// MAC without one gets ErrNoLease: a REQUEST allocates nothing (its client DISCOVERs again), so
// REQUESTs from made-up MACs take no address and cause no write. While writes fail, it returns
// the write's error instead: the lease may be missing because its allocation could not be
// written (an OFFER's write runs in the background, and nobody waits for it).
func (s *Store) BindLease(mac string, pool Pool) (Lease, error) {
	s.mu.Lock()
	i := s.ownLease(mac, pool)
	if i < 0 {
		failed := s.failed
		s.mu.Unlock()
		if failed != nil {
			return Lease{}, fmt.Errorf("%s holds no discovery lease, and the inventory's last write failed: %w", mac, failed)
		}
		return Lease{}, fmt.Errorf("%s: %w", mac, ErrNoLease)
	}
	allocated := s.leaseGen[mac] // the allocation's generation while it is not durable, else 0
	delete(s.offered, mac)
	l, g := s.renew(i, s.now().Add(pool.LeaseTime), pool.LeaseTime)
	s.mu.Unlock()
	err := s.commit(g)
	if err != nil && allocated != 0 {
		s.undoAllocation(l, allocated)
	}
	if !s.LeasedTo(l.Address, mac) { // taken back: its allocation was never written
		if err == nil {
			err = fmt.Errorf("%s: its lease was taken back meanwhile: %w", mac, ErrNoLease)
		}
		return Lease{}, err
	}
	return l, err
}

// ownLease returns the index of mac's lease in pool, or -1. A lease keeps its address even past
// expiry (stable for the machine): allocation prunes expired leases whenever it hands out their
// address, so a lease still listed is still this MAC's own. Callers hold s.mu.
func (s *Store) ownLease(mac string, pool Pool) int {
	if i := s.leaseIndex(mac); i >= 0 && pool.Contains(s.data.Leases[i].Address) {
		return i
	}
	return -1
}

// reoffer renews lease i for an OFFER and returns the generation to write, in the background
// like an allocation. Callers hold s.mu.
func (s *Store) reoffer(i int, pool Pool) (Lease, uint64) {
	now := s.now()
	mac := s.data.Leases[i].MAC
	if _, offer := s.offered[mac]; offer {
		s.offered[mac] = now.Add(pool.offerHold()) // a client whose OFFERs get lost keeps its offer while it asks
	}
	return s.renew(i, now.Add(pool.LeaseTime), pool.LeaseTime)
}

// leaseIndex returns the index of mac's discovery lease, expired or not, or -1. Callers hold s.mu.
func (s *Store) leaseIndex(mac string) int {
	return slices.IndexFunc(s.data.Leases, func(l Lease) bool { return l.MAC == mac && !l.Declined })
}

// commitAllocation writes new lease l (generation g), and removes it again when the write fails.
// Once it is written, l's MAC is forgotten (leaseGen): a MAC that only ever DISCOVERs (a flood of
// made-up ones) leaves nothing behind but its lease, which allocation prunes.
func (s *Store) commitAllocation(l Lease, g uint64) {
	if err := s.commit(g); err != nil {
		s.undoAllocation(l, g)
		return
	}
	s.mu.Lock()
	if s.leaseGen[l.MAC] == g {
		delete(s.leaseGen, l.MAC)
	}
	s.mu.Unlock()
}

// undoAllocation removes lease l (generation g) after its write failed, unless a later write
// made it durable meanwhile (then it stands). The removal is written with the next change; until
// then the file or its journal may hold l, which only keeps its address unused.
func (s *Store) undoAllocation(l Lease, g uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.durable >= g || s.leaseGen[l.MAC] != g {
		// Durable after all; or taken back already (by the other of OFFER and REQUEST, which
		// both undo), or replaced by a newer allocation for the MAC, perhaps of the same
		// address: that one is not ours to remove.
		return
	}
	// By MAC and address: a renewal may have moved its expiry since.
	s.data.Leases = slices.DeleteFunc(slices.Clone(s.data.Leases), func(x Lease) bool {
		return x.MAC == l.MAC && x.Address == l.Address && !x.Declined
	})
	delete(s.leaseGen, l.MAC)
	delete(s.offered, l.MAC)
}

// renew extends lease i and returns the generation to wait for (0: none). Waiting machines renew
// on every poll, every few seconds, so the file is written only when the last write is half a
// lease old: every lease on disk then still has at least half its time left. A lease whose
// allocation is still being written is not handed out before that write is done.
// Callers hold s.mu.
func (s *Store) renew(i int, expires time.Time, leaseTime time.Duration) (Lease, uint64) {
	l := &s.data.Leases[i]
	l.Expires = expires
	if g, ok := s.leaseGen[l.MAC]; ok {
		if g > s.durable {
			// The allocation's write is pending: it carries this lease with an expiry at most
			// moments older, which keeps the rule above.
			return *l, g
		}
		delete(s.leaseGen, l.MAC)
	}
	if s.now().Sub(s.persisted) >= leaseTime/2 {
		return *l, s.bump()
	}
	return *l, 0
}

// LeaseOf returns mac's discovery lease, expired or not.
func (s *Store) LeaseOf(mac string) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.leaseIndex(mac); i >= 0 {
		return s.data.Leases[i], nil
	}
	return Lease{}, fmt.Errorf("lease of %s: %w", mac, ErrNotFound)
}

// freeAddress finds the lowest pool address not held by an unexpired lease or a node, preferring
// (when prefer is not nil) the lowest such address that prefer accepts. The walk stops at the
// first preferred address, though the set of held addresses it checks against is built whole
// (every live lease and node) each time.
func (s *Store) freeAddress(pool Pool, now time.Time, prefer func(netip.Addr) bool) (netip.Addr, bool, error) {
	var first netip.Addr
	for a := range s.free(pool, now) {
		if prefer == nil || prefer(a) {
			return a, prefer != nil, nil
		}
		if !first.IsValid() {
			first = a
		}
	}
	if !first.IsValid() {
		return netip.Addr{}, false, fmt.Errorf("%w: all of %s-%s are leased or declined; widen [discovery] or shorten its lease_time", ErrPoolExhausted, pool.Start, pool.End)
	}
	return first, false, nil
}

// free yields the pool's addresses not held by an unexpired lease or a node, lowest first: the
// walk stops where its caller does. Callers hold s.mu.
func (s *Store) free(pool Pool, now time.Time) iter.Seq[netip.Addr] {
	used := s.usedAddresses(now)
	return func(yield func(netip.Addr) bool) {
		for a := pool.Start; a.IsValid() && a.Compare(pool.End) <= 0; a = a.Next() {
			if !used[a] && !yield(a) {
				return
			}
		}
	}
}

// usedAddresses is the set of addresses that live leases and nodes hold. Callers hold s.mu.
func (s *Store) usedAddresses(now time.Time) map[netip.Addr]bool {
	used := make(map[netip.Addr]bool, len(s.data.Leases)+len(s.data.Nodes))
	for _, l := range s.data.Leases {
		if s.live(l, now) {
			used[l.Address] = true
		}
	}
	for _, n := range s.data.Nodes {
		used[n.Address] = true
	}
	return used
}

// FreeAddresses returns the n lowest free addresses of the pool: the ones the next allocations
// will take, worth probing ahead of time.
func (s *Store) FreeAddresses(pool Pool, n int) []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var free []netip.Addr
	for a := range s.free(pool, s.now()) {
		if len(free) == n {
			break
		}
		free = append(free, a)
	}
	return free
}

// prunedFor returns the leases without expired ones, without mac's old one and without a lapsed
// offer of addr, which mac is about to get (a copy: the old slice stays intact for rollback).
func (s *Store) prunedFor(mac string, addr netip.Addr, now time.Time) []Lease {
	return slices.DeleteFunc(slices.Clone(s.data.Leases), func(l Lease) bool {
		gone := !l.Expires.After(now) || (l.MAC == mac && !l.Declined) || (l.Address == addr && !l.Declined)
		if gone && l.MAC != mac {
			delete(s.offered, l.MAC)
			delete(s.leaseGen, l.MAC)
		}
		return gone
	})
}

// live reports whether l holds its address at now: unexpired, and not an offer its client never
// REQUESTed within the pool's offer hold. Which leases are offers is known in memory only; after
// a restart every lease counts as bound. Allocation, the free list and the squatter checks
// (holder) all ask this one question.
func (s *Store) live(l Lease, now time.Time) bool {
	lapses, offer := s.offered[l.MAC]
	return l.Expires.After(now) && (!offer || l.Declined || now.Before(lapses))
}

// Contains reports whether a lies in the pool.
func (p Pool) Contains(a netip.Addr) bool {
	return a.Compare(p.Start) >= 0 && a.Compare(p.End) <= 0
}

// Leases returns a copy of the discovery leases.
func (s *Store) Leases() []Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.data.Leases)
}

// AddressHolder returns the MAC of the machine that holds a: its unexpired discovery lease or
// its node. used is false when a is free; mac is "" for an address held back (declined).
func (s *Store) AddressHolder(a netip.Addr) (mac string, used bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holder(a)
}

// holder is AddressHolder for callers that hold s.mu.
func (s *Store) holder(a netip.Addr) (mac string, used bool) {
	if i := slices.IndexFunc(s.data.Nodes, func(n Node) bool { return n.Address == a }); i >= 0 {
		return s.data.Nodes[i].MAC, true
	}
	now := s.now()
	for _, l := range s.data.Leases {
		if l.Address == a && s.live(l, now) {
			return l.MAC, true
		}
	}
	return "", false
}

// LeasedTo reports whether the inventory lists a lease of a for mac, expired or not: a machine
// answering at such an address is at its own (a lease keeps its address past expiry).
func (s *Store) LeasedTo(a netip.Addr, mac string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.data.Leases, func(l Lease) bool { return l.Address == a && l.MAC == mac && !l.Declined })
}
