package inventory

import (
	"net/netip"
	"sync"
	"sync/atomic"
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
	if _, err := s.HoldAddress(macA, l.Address, "", pool.LeaseTime); err != nil {
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
	_, _ = s.HoldAddress("", netip.MustParseAddr("10.80.0.202"), "", pool.LeaseTime)
	_, _ = s.HoldAddress("", netip.MustParseAddr("10.80.0.202"), "", pool.LeaseTime)
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

// A MAC gets at most MaxHoldsPerMAC holds that have not ended, on every path (a probe's hold, a
// free address's, its own declines), also after a restart: an ended hold gives its share back,
// the same address again costs nothing, and a decline over the share frees the address.
func TestHoldShare(t *testing.T) {
	const spoofer = "52:54:00:77:77:77"
	pool := Pool{Start: netip.MustParseAddr("10.80.0.200"), End: netip.MustParseAddr("10.80.0.209"), LeaseTime: time.Minute}
	a := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 80, 0, byte(200 + i)}) }
	tests := []struct {
		name  string
		setup func(s *Store, c *clock) *Store // then the spoofer answers at a(5), then declines a lease
		want  Hold
		// the decline: held while the spoofer has a share left, else the address is freed
		wantDecline Hold
	}{
		{"within the share", func(s *Store, c *clock) *Store {
			holdAt(t, s, spoofer, a(0), a(1))
			return s
		}, Held, OverShare},
		{"over the share", func(s *Store, c *clock) *Store {
			holdAt(t, s, spoofer, a(0), a(1), a(2))
			return s
		}, OverShare, OverShare},
		{"the same address again", func(s *Store, c *clock) *Store {
			holdAt(t, s, spoofer, a(0), a(1), a(5))
			return s
		}, Held, OverShare},
		{"ended holds give their share back", func(s *Store, c *clock) *Store {
			holdAt(t, s, spoofer, a(0), a(1), a(2))
			c.t = c.t.Add(holdTime(pool.LeaseTime))
			return s
		}, Held, Held},
		{"the share survives a restart", func(s *Store, c *clock) *Store {
			holdAt(t, s, spoofer, a(0), a(1), a(2))
			return reopen(t, s, c)
		}, OverShare, OverShare},
		{"other MACs' holds are theirs", func(s *Store, c *clock) *Store {
			holdAt(t, s, "52:54:00:00:00:09", a(0), a(1), a(2))
			return s
		}, Held, Held},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, c := newStore(t)
			s = tc.setup(s, c)
			if h, err := s.HoldAddress("", a(5), spoofer, pool.LeaseTime); err != nil || h != tc.want {
				t.Errorf("hold = %v, %v; want %v", h, err, tc.want)
			}
			l, err := dora(s, spoofer, pool)
			if err != nil {
				t.Fatal(err)
			}
			h, err := s.ReleaseLease(spoofer, l.Address, true, pool.LeaseTime)
			if err != nil || h != tc.wantDecline {
				t.Errorf("decline = %v, %v; want %v", h, err, tc.wantDecline)
			}
			if _, used := s.AddressHolder(l.Address); used != (h == Held) {
				t.Errorf("declined %s in use %v; want held only within the share", l.Address, used)
			}
		})
	}
}

// holdAt holds the addresses back on holder's account, as the scout does for a host it finds.
func holdAt(t *testing.T, s *Store, holder string, addrs ...netip.Addr) {
	t.Helper()
	for _, a := range addrs {
		if h, err := s.HoldFreeAddress(a, holder, time.Minute); err != nil || h != Held {
			t.Fatalf("hold %s: %v, %v", a, h, err)
		}
	}
}

// Concurrent holds for one MAC (a boot storm's probes, the scout) cannot all pass the share
// while their durable writes are slow: the check and the hold are one step.
func TestHoldShareConcurrent(t *testing.T) {
	s, _ := newStore(t)
	swapWriteState(t, s, func(w stateWrite) error {
		time.Sleep(20 * time.Millisecond) // a slow fsync
		return performWrite(w)
	})
	const spoofer = "52:54:00:77:77:77"
	var wg sync.WaitGroup
	var held atomic.Int32
	for i := range 20 {
		wg.Go(func() {
			if h, err := s.HoldFreeAddress(netip.AddrFrom4([4]byte{10, 80, 0, byte(200 + i)}), spoofer, time.Minute); err == nil && h == Held {
				held.Add(1)
			}
		})
	}
	wg.Wait()
	n := 0
	for _, l := range s.Leases() {
		if l.HeldFor == spoofer {
			n++
		}
	}
	if held.Load() != MaxHoldsPerMAC || n != MaxHoldsPerMAC {
		t.Errorf("%d holds made at once for one MAC, %d listed; want %d", held.Load(), n, MaxHoldsPerMAC)
	}
}
