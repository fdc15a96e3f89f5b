package inventory

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// ErrPoolExhausted is returned when every discovery address is leased or declined.
var ErrPoolExhausted = errors.New("discovery pool exhausted")

// declineHold keeps an address that a client found in use out of the pool for a while, in
// multiples of the lease time, so one misbehaving host does not make the pool spin.
const declineHold = 10

// DiscoveryLease returns mac's discovery lease, renewing it, or leases the lowest free address
// of the pool. An address is never leased to two MACs at once, and never one a node holds.
func (s *Store) DiscoveryLease(mac string, pool Pool) (Lease, error) {
	l, _, err := s.DiscoveryLeaseFresh(mac, pool)
	return l, err
}

// DiscoveryLeaseFresh is DiscoveryLease, and reports whether the address was newly allocated to
// mac (fresh) rather than renewed: a fresh address is one the caller may want to check on the
// segment (ARP probe) before offering it, and hold back with HoldAddress if it is in use.
func (s *Store) DiscoveryLeaseFresh(mac string, pool Pool) (l Lease, fresh bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	expires := now.Add(pool.LeaseTime)
	// A lease keeps its address even past expiry (stable for the machine): allocation prunes expired
	// leases whenever it hands out their address, so a lease still listed is still this MAC's own.
	if i := slices.IndexFunc(s.data.Leases, func(l Lease) bool { return l.MAC == mac && !l.Declined }); i >= 0 && pool.contains(s.data.Leases[i].Address) {
		l, err := s.renew(i, expires, pool.LeaseTime)
		return l, false, err
	}
	addr, err := s.freeAddress(pool, now)
	if err != nil {
		return Lease{}, false, err
	}
	old := s.data
	l = Lease{MAC: mac, Address: addr, Expires: expires}
	s.data.Leases = append(s.prunedFor(mac, now), l)
	if err := s.save(); err != nil {
		s.data = old
		return Lease{}, false, err
	}
	return l, true, nil
}

// renew extends lease i. Waiting machines renew on every poll, every few seconds, so the file
// is written only when the last write is half a lease old: every lease on disk then still has
// at least half its time left.
func (s *Store) renew(i int, expires time.Time, leaseTime time.Duration) (Lease, error) {
	l := &s.data.Leases[i]
	l.Expires = expires
	if s.now().Sub(s.persisted) < leaseTime/2 {
		return *l, nil
	}
	return *l, s.save()
}

// LeaseOf returns mac's discovery lease, expired or not.
func (s *Store) LeaseOf(mac string) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.IndexFunc(s.data.Leases, func(l Lease) bool { return l.MAC == mac && !l.Declined }); i >= 0 {
		return s.data.Leases[i], nil
	}
	return Lease{}, fmt.Errorf("lease of %s: %w", mac, ErrNotFound)
}

// freeAddress finds the lowest pool address not held by an unexpired lease or a node.
func (s *Store) freeAddress(pool Pool, now time.Time) (netip.Addr, error) {
	used := map[netip.Addr]bool{}
	for _, l := range s.data.Leases {
		if l.Expires.After(now) {
			used[l.Address] = true
		}
	}
	for _, n := range s.data.Nodes {
		used[n.Address] = true
	}
	for a := pool.Start; a.IsValid() && a.Compare(pool.End) <= 0; a = a.Next() {
		if !used[a] {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: all of %s-%s are leased or declined; widen [discovery] or shorten its lease_time", ErrPoolExhausted, pool.Start, pool.End)
}

// prunedFor returns the leases without expired ones and without mac's old one (a copy: the old
// slice stays intact for rollback).
func (s *Store) prunedFor(mac string, now time.Time) []Lease {
	return slices.DeleteFunc(slices.Clone(s.data.Leases), func(l Lease) bool {
		return !l.Expires.After(now) || (l.MAC == mac && !l.Declined)
	})
}

func (p Pool) contains(a netip.Addr) bool {
	return a.Compare(p.Start) >= 0 && a.Compare(p.End) <= 0
}

// ReleaseLease ends mac's discovery lease. When declined, the client reported the address in use
// by another host: the address is held back from the pool for a while instead of being freed.
func (s *Store) ReleaseLease(mac string, declined bool, leaseTime time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.data.Leases, func(l Lease) bool { return l.MAC == mac && !l.Declined })
	if i < 0 {
		return fmt.Errorf("lease of %s: %w", mac, ErrNotFound)
	}
	old := s.data
	s.data.Leases = slices.Clone(s.data.Leases)
	if declined {
		s.data.Leases[i] = Lease{Address: s.data.Leases[i].Address, Declined: true, Expires: s.now().Add(declineHold * leaseTime)}
	} else {
		s.data.Leases = slices.Delete(s.data.Leases, i, i+1)
	}
	if err := s.save(); err != nil {
		s.data = old
		return err
	}
	return nil
}

// HoldAddress takes addr out of the pool as if a client had declined it: another host on the
// segment answers at it (an ARP probe found it). mac's lease on addr, if it has one, becomes the
// hold, so that machine gets another address at its next request.
func (s *Store) HoldAddress(mac string, addr netip.Addr, leaseTime time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.data
	s.data.Leases = slices.DeleteFunc(slices.Clone(s.data.Leases), func(l Lease) bool {
		return l.Address == addr && (l.Declined || l.MAC == mac)
	})
	s.data.Leases = append(s.data.Leases, Lease{Address: addr, Declined: true, Expires: s.now().Add(declineHold * leaseTime)})
	if err := s.save(); err != nil {
		s.data = old
		return err
	}
	return nil
}

// Leases returns a copy of the discovery leases.
func (s *Store) Leases() []Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.data.Leases)
}
