package bootd

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/labcluster/gpucluster/internal/inventory"
)

// A node declining its address (another host uses it) is logged as an error, at most once per
// ratelog.Every, from the first decline after start on.
func TestNodeDeclineLogged(t *testing.T) {
	d := testDaemon(t)
	log, hook := test.NewNullLogger()
	d.log = log
	if err := assignC1(t, d, machineA, false); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		(leaser{d}).Release(hw(machineA), netip.MustParseAddr("10.80.0.101"), true)
	}
	if n := namedIn(hook, logrus.ErrorLevel, "node", "c1"); n != 1 {
		t.Errorf("%d errors name c1 declining its address, want 1", n)
	}
}

// One host answering ARP for the whole pool, or declining every address it gets, holds back at
// most inventory.MaxHoldsPerMAC addresses, is named in one error, and clients keep getting addresses:
// through the leaser's own probe, the scout's re-probe of an offer, and DECLINEs.
func TestOneMACCannotEmptyThePool(t *testing.T) {
	spoofer := hw("52:54:00:77:77:77")
	everywhere := func() *fakeProber {
		p := &fakeProber{taken: map[netip.Addr]net.HardwareAddr{}}
		for a := netip.MustParseAddr("10.80.0.200"); a.Compare(netip.MustParseAddr("10.80.0.249")) <= 0; a = a.Next() {
			p.taken[a] = spoofer
		}
		return p
	}
	tests := []struct {
		name    string
		prober  *fakeProber
		scout   bool
		clients func(t *testing.T, d *daemon) int // leases handed out
	}{
		{"the leaser's probe", everywhere(), false, func(t *testing.T, d *daemon) int {
			got := 0
			for i := range 20 {
				for range 2 { // a client that got nothing asks again, as DHCP clients do
					if _, ok, err := dora(d, hw(fmt.Sprintf("52:54:00:00:01:%02x", i)), true); ok && err == nil {
						got++
						break
					}
				}
			}
			return got
		}},
		{"the re-probe of offers", &fakeProber{taken: map[netip.Addr]net.HardwareAddr{}}, true, func(t *testing.T, d *daemon) int {
			d.scout.round(t.Context()) // every address vouched for, then the spoofer answers
			p := d.probe.(*fakeProber)
			p.mu.Lock()
			p.taken = everywhere().taken
			p.mu.Unlock()
			got := 0
			for i := range 20 {
				// The REQUEST waits for its OFFER's re-probe; a client NAKed because the re-probe
				// took its address back asks again, as DHCP clients do.
				for range inventory.MaxHoldsPerMAC + 1 {
					if _, ok, err := dora(d, hw(fmt.Sprintf("52:54:00:00:01:%02x", i)), true); ok && err == nil {
						got++
						break
					}
				}
			}
			return got
		}},
		{"declines", &fakeProber{taken: map[netip.Addr]net.HardwareAddr{}}, false, func(t *testing.T, d *daemon) int {
			got := 0
			for range 20 {
				l, ok, err := dora(d, spoofer, true)
				if err != nil || !ok {
					t.Fatalf("the spoofer's lease: %v %v", ok, err)
				}
				got++
				(leaser{d}).Release(spoofer, l.IP, true)
			}
			return got
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := testDaemon(t)
			log, hook := test.NewNullLogger()
			d.log, d.probe = log, tc.prober
			if tc.scout {
				d.scout = newScout(d)
			}
			if got := tc.clients(t, d); got != 20 {
				t.Errorf("%d of 20 clients got a lease", got)
			}
			n := 0
			for _, l := range d.inv.Leases() {
				if l.Declined {
					n++
				}
			}
			if n != inventory.MaxHoldsPerMAC {
				t.Errorf("%d addresses held back, want %d", n, inventory.MaxHoldsPerMAC)
			}
			if named := namedIn(hook, logrus.ErrorLevel, "mac", spoofer.String()); named != 1 {
				t.Errorf("%d errors name the spoofer as over its share, want 1", named)
			}
		})
	}
}

func namedIn(hook *test.Hook, level logrus.Level, key, value string) int {
	n := 0
	for _, e := range hook.AllEntries() {
		if e.Level == level && e.Data[key] == value {
			n++
		}
	}
	return n
}
