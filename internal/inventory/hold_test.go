package inventory

import (
	"net/netip"
	"testing"
	"time"
)

// An ARP probe found the fresh address in use: HoldAddress keeps it out of the pool like a
// declined one, the machine gets the next address, and only fresh allocations say so.
func TestOfferLeaseAndHold(t *testing.T) {
	pool := Pool{Start: netip.MustParseAddr("10.80.0.200"), End: netip.MustParseAddr("10.80.0.202"), LeaseTime: 2 * time.Minute}
	s, c := newStore(t)
	l, fresh, _, err := s.OfferLease(macA, pool, nil)
	if err != nil || !fresh || l.Address != pool.Start {
		t.Fatalf("first lease = %v fresh=%v, %v; want a fresh %s", l.Address, fresh, err, pool.Start)
	}
	if err := s.HoldAddress(macA, l.Address, pool.LeaseTime); err != nil {
		t.Fatal(err)
	}
	l, fresh, _, err = s.OfferLease(macA, pool, nil)
	if err != nil || !fresh || l.Address.String() != "10.80.0.201" {
		t.Fatalf("after the hold: %v fresh=%v, %v; want a fresh 10.80.0.201", l.Address, fresh, err)
	}
	if l, fresh, _, err = s.OfferLease(macA, pool, nil); err != nil || fresh || l.Address.String() != "10.80.0.201" {
		t.Fatalf("renewal: %v fresh=%v, %v; want 10.80.0.201 not fresh", l.Address, fresh, err)
	}
	if l, err = s.BindLease(macA, pool); err != nil || l.Address.String() != "10.80.0.201" { // durable before the reopen
		t.Fatalf("REQUEST: %v, %v; want 10.80.0.201", l.Address, err)
	}
	// The hold survives a reopen and other machines' leases for declineHold lease times.
	s = reopen(t, s, c)
	c.t = c.t.Add(5 * time.Minute)
	if l, _ := dora(s, macB, pool); l.Address.String() != "10.80.0.201" {
		t.Fatalf("B got %v while 10.80.0.200 is held and A's lease expired; want 10.80.0.201", l.Address)
	}
	c.t = c.t.Add(declineHold * pool.LeaseTime)
	if l, _ := dora(s, macC, pool); l.Address != pool.Start {
		t.Fatalf("after the hold expired C got %v, want %s", l.Address, pool.Start)
	}
	// Holding an address twice keeps one entry.
	_ = s.HoldAddress("", netip.MustParseAddr("10.80.0.202"), pool.LeaseTime)
	_ = s.HoldAddress("", netip.MustParseAddr("10.80.0.202"), pool.LeaseTime)
	n := 0
	for _, l := range s.Leases() {
		if l.Address.String() == "10.80.0.202" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("10.80.0.202 listed %d times after two holds", n)
	}
	assertNoSharedAddress(t, s, c.t)
}

// reopen loads s's file into a new store on the same clock.
func reopen(t *testing.T, s *Store, c *clock) *Store {
	t.Helper()
	r := open(t, s.Path())
	r.now = c.now
	return r
}
