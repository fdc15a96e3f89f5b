package inventory

import (
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// declineHold keeps an address that a client found in use out of the pool for a while, in
// multiples of the lease time, so one misbehaving host does not make the pool spin.
const declineHold = 10

// MaxHoldsPerMAC is how many pool addresses may be held back at once on one MAC's account: found
// answering ARP at them, or declined by it. A router doing proxy ARP answers for every address,
// and a spoofer can answer for them all, or decline every address it gets; either would empty
// the pool. Past the limit that MAC's answers count for nothing (the client gets the address,
// and declines it itself if it is really in use) and its declines free the address. The holds
// are in the inventory, so the count survives a restart.
const MaxHoldsPerMAC = 3

// Hold is what a request to hold an address back did.
type Hold int

const (
	NotHeld   Hold = iota // the address was not free (HoldFreeAddress)
	Held                  // held back for holdTime, on the account's share
	OverShare             // the account holds MaxHoldsPerMAC addresses already: nothing held
)

// holdTime is how long an address declined or found in use stays out of the pool.
func holdTime(leaseTime time.Duration) time.Duration { return declineHold * leaseTime }

// ReleaseLease ends mac's discovery lease on addr (the address the RELEASE or DECLINE names). A
// lease on another address, or an OFFER never REQUESTed, is left alone: the message is stale or
// forged (chaddr alone is easy to forge), and a DECLINE is only meaningful after an ACK (RFC
// 2131 4.4.1). A DECLINE says another host uses the address: it is held back on mac's account
// (Held), or freed when mac is over its share (OverShare); a RELEASE frees it (NotHeld).
// Group-committed: on a failed write the change stays in memory (see Store).
func (s *Store) ReleaseLease(mac string, addr netip.Addr, declined bool, leaseTime time.Duration) (Hold, error) {
	s.mu.Lock()
	i := s.leaseIndex(mac)
	_, unbound := s.offered[mac]
	if i < 0 || s.data.Leases[i].Address != addr || (declined && unbound) {
		s.mu.Unlock()
		return NotHeld, fmt.Errorf("lease of %s on %s: %w", mac, addr, ErrNotFound)
	}
	h, g := NotHeld, uint64(0)
	if declined {
		h, g = s.hold(mac, addr, mac, leaseTime)
	}
	if h != Held {
		s.data.Leases = slices.Delete(slices.Clone(s.data.Leases), i, i+1)
		delete(s.offered, mac)
		g = s.bump()
	}
	s.mu.Unlock()
	return h, s.commit(g)
}

// HoldAddress takes addr out of the pool on holder's account (the host an ARP probe found
// answering at it), unless holder is over its share. client's lease on addr, if it has one,
// becomes the hold, so that machine gets another address at its next request.
// Group-committed: on a failed write the hold stays in memory (see Store).
func (s *Store) HoldAddress(client string, addr netip.Addr, holder string, leaseTime time.Duration) (Hold, error) {
	s.mu.Lock()
	h, g := s.hold(client, addr, holder, leaseTime)
	s.mu.Unlock()
	return h, s.commit(g)
}

// HoldFreeAddress is HoldAddress for an address found in use while nobody had it: it holds addr
// only if it is still free now (no unexpired lease, no node; else NotHeld).
func (s *Store) HoldFreeAddress(addr netip.Addr, holder string, leaseTime time.Duration) (Hold, error) {
	s.mu.Lock()
	if _, used := s.holder(addr); used {
		s.mu.Unlock()
		return NotHeld, nil
	}
	h, g := s.hold("", addr, holder, leaseTime)
	s.mu.Unlock()
	return h, s.commit(g)
}

// hold holds addr back on holder's account ("": none, no share) in place of client's lease on
// it, and returns the generation to wait for; or OverShare, changing nothing. The check and the
// hold are one step under s.mu, so concurrent probes cannot all pass the check. Callers hold s.mu.
func (s *Store) hold(client string, addr netip.Addr, holder string, leaseTime time.Duration) (Hold, uint64) {
	now := s.now()
	if holder != "" && s.holdsOf(holder, addr, now) >= MaxHoldsPerMAC {
		return OverShare, 0
	}
	s.data.Leases = slices.DeleteFunc(slices.Clone(s.data.Leases), func(l Lease) bool {
		return l.Address == addr && (l.Declined || l.MAC == client)
	})
	delete(s.offered, client)
	s.data.Leases = append(s.data.Leases, Lease{Address: addr, Declined: true, HeldFor: holder, Expires: now.Add(holdTime(leaseTime))})
	return Held, s.bump()
}

// holdsOf counts the unexpired holds on holder's account other than one at addr (holding the
// same address again costs nothing). Callers hold s.mu.
func (s *Store) holdsOf(holder string, addr netip.Addr, now time.Time) int {
	n := 0
	for _, l := range s.data.Leases {
		if l.Declined && l.HeldFor == holder && l.Address != addr && l.Expires.After(now) {
			n++
		}
	}
	return n
}
