package inventory

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDiscoveryLease(t *testing.T) {
	pool := Pool{Start: netip.MustParseAddr("10.80.0.200"), End: netip.MustParseAddr("10.80.0.202"), LeaseTime: 2 * time.Minute}
	type step struct {
		mac     string
		advance time.Duration
		release bool
		decline bool
		offer   bool   // a DISCOVER's lease (not bound) instead of a REQUEST's
		bind    bool   // BindLease instead (want "none": ErrNoLease)
		at      string // the address a release or decline names
		want    string // address, or "exhausted"; for a release or decline: "ignored" or ""
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"lowest free address", []step{{mac: macA, want: "10.80.0.200"}, {mac: macB, want: "10.80.0.201"}}},
		{"renewal keeps the address", []step{{mac: macA, want: "10.80.0.200"}, {mac: macB, want: "10.80.0.201"}, {mac: macA, advance: time.Minute, want: "10.80.0.200"}}},
		{"stable even after expiry while free", []step{{mac: macA, want: "10.80.0.200"}, {mac: macA, advance: time.Hour, want: "10.80.0.200"}}},
		{"expired address goes to another", []step{{mac: macA, want: "10.80.0.200"}, {mac: macB, advance: time.Hour, want: "10.80.0.200"}, {mac: macA, want: "10.80.0.201"}}},
		{"exhausted", []step{{mac: macA, want: "10.80.0.200"}, {mac: macB, want: "10.80.0.201"}, {mac: macC, want: "10.80.0.202"}, {mac: "52:54:00:00:00:0d", want: "exhausted"}}},
		{"release frees", []step{{mac: macA, want: "10.80.0.200"}, {mac: macA, release: true, at: "10.80.0.200"}, {mac: macB, want: "10.80.0.200"}}},
		{"decline holds the address back", []step{{mac: macA, want: "10.80.0.200"}, {mac: macA, decline: true, at: "10.80.0.200"}, {mac: macA, want: "10.80.0.201"}, {mac: macB, advance: 5 * time.Minute, want: "10.80.0.201"}}},
		{"release naming another address is ignored", []step{{mac: macA, want: "10.80.0.200"}, {mac: macA, release: true, at: "10.80.0.201", want: "ignored"}, {mac: macB, want: "10.80.0.201"}}},
		{"decline naming another address is ignored", []step{{mac: macA, want: "10.80.0.200"}, {mac: macA, decline: true, at: "10.80.0.202", want: "ignored"}, {mac: macB, want: "10.80.0.201"}, {mac: macC, want: "10.80.0.202"}}},
		{"decline of an offer never requested is ignored", []step{{mac: macA, offer: true, want: "10.80.0.200"}, {mac: macA, decline: true, at: "10.80.0.200", want: "ignored"}, {mac: macA, want: "10.80.0.200"}}},
		{"release without a lease is ignored", []step{{mac: macA, release: true, at: "10.80.0.200", want: "ignored"}}},
		{"bind without a lease allocates nothing", []step{{mac: macA, bind: true, want: "none"}, {mac: macB, want: "10.80.0.200"}}},
		{"bind takes the offer", []step{{mac: macA, offer: true, want: "10.80.0.200"}, {mac: macA, bind: true, want: "10.80.0.200"}}},
		{"bind keeps an expired lease while free", []step{{mac: macA, want: "10.80.0.200"}, {mac: macA, bind: true, advance: time.Hour, want: "10.80.0.200"}}},
		{"bind after the address went to another", []step{{mac: macA, want: "10.80.0.200"}, {mac: macB, advance: time.Hour, want: "10.80.0.200"}, {mac: macA, bind: true, want: "none"}}},
		{"bind after a release", []step{{mac: macA, want: "10.80.0.200"}, {mac: macA, release: true, at: "10.80.0.200"}, {mac: macA, bind: true, want: "none"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c := newStore(t)
			for i, st := range tt.steps {
				c.t = c.t.Add(st.advance)
				if st.release || st.decline {
					h, err := s.ReleaseLease(st.mac, netip.MustParseAddr(st.at), st.decline, pool.LeaseTime)
					got := ""
					if errors.Is(err, ErrNotFound) {
						got = "ignored"
					} else if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if got != st.want || (h == Held) != (got == "" && st.decline) {
						t.Fatalf("step %d (%s %s): %q, hold %v; want %q", i, st.mac, st.at, got, h, st.want)
					}
					continue
				}
				var l Lease
				var err error
				if st.bind {
					l, err = s.BindLease(st.mac, pool)
				} else if st.offer {
					l, _, _, err = s.OfferLease(st.mac, pool, nil)
				} else {
					l, err = dora(s, st.mac, pool)
				}
				got := l.Address.String()
				switch {
				case errors.Is(err, ErrPoolExhausted):
					got = "exhausted"
				case errors.Is(err, ErrNoLease):
					got = "none"
				case err != nil:
					t.Fatalf("step %d: %v", i, err)
				}
				if got != st.want {
					t.Fatalf("step %d (%s): got %s, want %s", i, st.mac, got, st.want)
				}
			}
			assertNoSharedAddress(t, s, c.t)
		})
	}
}

// dora leases mac an address as a DHCP client does, an OFFER and then a REQUEST, and returns
// it once it is durable.
func dora(s *Store, mac string, pool Pool) (Lease, error) {
	if _, _, _, err := s.OfferLease(mac, pool, nil); err != nil {
		return Lease{}, err
	}
	return s.BindLease(mac, pool)
}

func assertNoSharedAddress(t *testing.T, s *Store, now time.Time) {
	t.Helper()
	holder := map[netip.Addr]string{}
	for _, l := range s.Leases() {
		if !l.Expires.After(now) {
			continue
		}
		if h, dup := holder[l.Address]; dup {
			t.Fatalf("%s leased to %s and %s", l.Address, h, l.MAC)
		}
		holder[l.Address] = l.MAC
	}
}

func TestPoolNeverHandsOutANodeAddress(t *testing.T) {
	s, _ := newStore(t)
	see(t, s, macA)
	if _, err := s.Assign(AssignRequest{Name: "c1", Role: "compute", Address: netip.MustParseAddr("10.80.0.200"), MAC: macA}); err != nil {
		t.Fatal(err)
	}
	pool := Pool{Start: netip.MustParseAddr("10.80.0.200"), End: netip.MustParseAddr("10.80.0.201"), LeaseTime: time.Minute}
	for i := range 2 {
		l, err := dora(s, fmt.Sprintf("52:54:00:00:01:%02x", i), pool)
		if i == 0 && (err != nil || l.Address.String() != "10.80.0.201") {
			t.Fatalf("first lease = %v, %v; want 10.80.0.201", l.Address, err)
		}
		if i == 1 && !errors.Is(err, ErrPoolExhausted) {
			t.Fatalf("second lease: err = %v, want exhausted", err)
		}
	}
}

// offerStore is a fresh inventory on a clock the test moves (*now), and a two-address pool whose
// offers lapse after 10 s.
func offerStore(t *testing.T) (*Store, *time.Time, Pool) {
	t.Helper()
	s := open(t, filepath.Join(t.TempDir(), "inventory.json"))
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	return s, &now, Pool{Start: netip.MustParseAddr("10.80.0.10"), End: netip.MustParseAddr("10.80.0.11"), LeaseTime: 2 * time.Minute, OfferHold: 10 * time.Second}
}

// An offer (unbound) holds its address for OfferHold only, then another MAC may take it; the
// REQUEST (bound) keeps it for the lease time, with no write of its own. So DISCOVERs that never
// REQUEST free the pool after OfferHold.
func TestOfferHold(t *testing.T) {
	s, now, pool := offerStore(t)
	lookup := func(mac string, bind bool) (Lease, error) {
		if bind {
			return s.BindLease(mac, pool)
		}
		l, _, _, err := s.OfferLease(mac, pool, nil)
		if err == nil {
			err = s.commit(s.gen) // the background write, made deterministic
		}
		return l, err
	}
	for _, tc := range []struct {
		name    string
		mac     string
		bind    bool
		advance time.Duration
		want    string // address, or "exhausted"
	}{
		{"flooder 1 is offered", "02:00:00:00:00:01", false, 0, "10.80.0.10"},
		{"flooder 2 is offered", "02:00:00:00:00:02", false, 0, "10.80.0.11"},
		{"a real client finds the pool taken", "52:54:00:00:00:01", false, 5 * time.Second, "exhausted"},
		{"after the offer hold it gets a lapsed offer's address", "52:54:00:00:00:01", false, 6 * time.Second, "10.80.0.10"},
		{"its REQUEST binds it", "52:54:00:00:00:01", true, time.Second, "10.80.0.10"},
		{"flooder 1, back, takes flooder 2's lapsed offer", "02:00:00:00:00:01", false, 0, "10.80.0.11"},
		{"flooder 2, back, finds nothing free", "02:00:00:00:00:02", false, 0, "exhausted"},
		{"a bound lease does not lapse", "52:54:00:00:00:02", false, time.Minute, "10.80.0.11"},
		{"the bound client keeps its address", "52:54:00:00:00:01", false, 0, "10.80.0.10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			*now = now.Add(tc.advance)
			l, err := lookup(tc.mac, tc.bind)
			if tc.want == "exhausted" {
				if !errors.Is(err, ErrPoolExhausted) {
					t.Fatalf("got %v, %v; want the pool exhausted", l, err)
				}
				return
			}
			if err != nil || l.Address.String() != tc.want || l.Expires.Sub(*now) != pool.LeaseTime {
				t.Fatalf("got %s expiring in %s (%v); want %s for the lease time", l.Address, l.Expires.Sub(*now), err, tc.want)
			}
		})
	}
	if n := len(s.offered); n > 2 {
		t.Fatalf("%d offers remembered, want at most the two flooders'", n)
	}
}

// A flood of DISCOVERs from made-up MACs, each offered once and never again, leaves no state
// behind per MAC beyond the leases the pool holds: OFFERs lapse and are pruned, and a written
// allocation's generation is forgotten.
func TestOfferFloodLeavesNoState(t *testing.T) {
	s, now, pool := offerStore(t)
	for i := range 500 {
		s.offers.Wait() // the clock is the test's: it moves while no write reads it
		*now = now.Add(time.Second)
		if _, _, _, err := s.OfferLease(fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256), pool, nil); err != nil && !errors.Is(err, ErrPoolExhausted) {
			t.Fatal(err)
		}
	}
	s.offers.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.data.Leases) > 2 || len(s.offered) > 2 || len(s.leaseGen) != 0 {
		t.Fatalf("after 500 one-off DISCOVERs on a pool of 2: %d leases, %d offers, %d generations remembered; want at most 2, 2 and none",
			len(s.data.Leases), len(s.offered), len(s.leaseGen))
	}
}

// TestLapsedOfferIsFreeEverywhere: once an offer lapses, its address is free to every question
// the inventory answers, not just to allocation: AddressHolder reports nobody, and a squatter
// found there is held back (HoldFreeAddress).
func TestLapsedOfferIsFreeEverywhere(t *testing.T) {
	s, now, pool := offerStore(t)
	flooder := "02:00:00:00:00:01"
	l, _, _, err := s.OfferLease(flooder, pool, nil)
	if err == nil {
		err = s.commit(s.gen)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		advance  time.Duration
		wantUsed bool
	}{
		{"offered: held", 0, true},
		{"within the offer hold: held", 9 * time.Second, true},
		{"lapsed: free", 2 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			*now = now.Add(tc.advance)
			mac, used := s.AddressHolder(l.Address)
			if used != tc.wantUsed || (used && mac != flooder) {
				t.Errorf("AddressHolder(%s) = %q, %v; want used %v", l.Address, mac, used, tc.wantUsed)
			}
		})
	}
	held, err := s.HoldFreeAddress(l.Address, "", pool.LeaseTime)
	if err != nil || held != Held {
		t.Fatalf("HoldFreeAddress on a lapsed offer's address = %v, %v; want it held", held, err)
	}
	if free := s.FreeAddresses(pool, -1); slices.Contains(free, l.Address) {
		t.Errorf("the held-back address %s is still listed free: %v", l.Address, free)
	}
}

// TestFreeAddressWalk: allocation takes the lowest free address that prefer accepts, else the
// lowest free one (not preferred), and FreeAddresses lists the lowest n free ones; leased
// addresses are skipped by both.
func TestFreeAddressWalk(t *testing.T) {
	pool := Pool{Start: netip.MustParseAddr("10.80.0.200"), End: netip.MustParseAddr("10.80.0.204"), LeaseTime: 2 * time.Minute}
	only := func(addrs ...string) func(netip.Addr) bool {
		return func(a netip.Addr) bool { return slices.Contains(addrs, a.String()) }
	}
	for _, tt := range []struct {
		name          string
		prefer        func(netip.Addr) bool
		want          string
		wantPreferred bool
	}{
		{"no preference: lowest free", nil, "10.80.0.201", false},
		{"a preferred address above the lowest", only("10.80.0.203"), "10.80.0.203", true},
		{"the preferred address is leased: lowest free, not preferred", only("10.80.0.200"), "10.80.0.201", false},
		{"nothing preferred: lowest free, not preferred", only(), "10.80.0.201", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			if _, err := dora(s, macA, pool); err != nil { // takes 10.80.0.200
				t.Fatal(err)
			}
			l, _, preferred, err := s.OfferLease(macB, pool, tt.prefer)
			if err != nil || l.Address.String() != tt.want || preferred != tt.wantPreferred {
				t.Errorf("got %s preferred=%v (%v), want %s preferred=%v", l.Address, preferred, err, tt.want, tt.wantPreferred)
			}
		})
	}
	s, _ := newStore(t)
	if _, err := dora(s, macA, pool); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		n    int
		want string
	}{
		{0, ""},
		{2, "10.80.0.201 10.80.0.202"},
		{-1, "10.80.0.201 10.80.0.202 10.80.0.203 10.80.0.204"},
		{9, "10.80.0.201 10.80.0.202 10.80.0.203 10.80.0.204"},
	} {
		var got []string
		for _, a := range s.FreeAddresses(pool, tt.n) {
			got = append(got, a.String())
		}
		if g := strings.Join(got, " "); g != tt.want {
			t.Errorf("FreeAddresses(%d) = %q, want %q", tt.n, g, tt.want)
		}
	}
}
