package inventory

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/testhook"
)

// swapWriteState replaces the state writer for one test of s. The test's end waits for s's
// background writes (OFFERs') before the writer is put back, so none reads it meanwhile.
func swapWriteState(t *testing.T, s *Store, w func(stateWrite) error) {
	t.Helper()
	testhook.Set(t, &writeState, w)
	t.Cleanup(s.offers.Wait)
}

// failingDisk makes every fdatasync of s fail for t (or until the returned function heals the
// disk).
func failingDisk(t *testing.T, s *Store) (heal func()) {
	t.Helper()
	healthy := datasync
	testhook.Set(t, &datasync, func(*os.File) error { return errors.New("fdatasync: input/output error") })
	t.Cleanup(s.offers.Wait)
	return func() { datasync = healthy }
}

var testPool = Pool{Start: netip.MustParseAddr("10.80.0.10"), End: netip.MustParseAddr("10.80.0.249"), LeaseTime: 2 * time.Minute}

// 50 concurrent new allocations share a few writes, get distinct addresses, and each is on disk
// when its REQUEST returns.
func TestGroupCommitSharesWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.json")
	s := open(t, path)
	var writes atomic.Int32
	swapWriteState(t, s, func(w stateWrite) error {
		writes.Add(1)
		time.Sleep(20 * time.Millisecond) // a slow fsync
		return performWrite(w)
	})
	const n = 50
	var wg sync.WaitGroup
	got := make([]Lease, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			got[i], errs[i] = dora(s, fmt.Sprintf("52:54:00:00:01:%02x", i), testPool)
			if errs[i] != nil {
				return
			}
			// Durable on return: a fresh load of the file has it.
			d, err := Open(path)
			if err == nil {
				if _, err = d.LeaseOf(got[i].MAC); err != nil {
					err = fmt.Errorf("lease of %s not on disk when its REQUEST returned", got[i].MAC)
				}
			}
			errs[i] = err
		})
	}
	wg.Wait()
	addrs := map[netip.Addr]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if addrs[got[i].Address] {
			t.Fatalf("address %s leased twice", got[i].Address)
		}
		addrs[got[i].Address] = true
	}
	if w := writes.Load(); w > 10 {
		t.Fatalf("%d writes for %d concurrent allocations; want them grouped (a few)", w, n)
	} else {
		t.Logf("%d writes for %d concurrent allocations", w, n)
	}
}

// A failed group write: a new allocation is undone and its REQUEST gets the error; a hold stays in
// memory with its error returned, and the next successful write puts it on disk.
func TestGroupCommitFailedWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.json")
	s := open(t, path)
	disk := errors.New("disk full")
	var fail atomic.Bool
	fail.Store(true)
	swapWriteState(t, s, func(w stateWrite) error {
		if fail.Load() {
			return disk
		}
		return performWrite(w)
	})
	if _, err := dora(s, "52:54:00:00:00:01", testPool); !errors.Is(err, disk) {
		t.Fatalf("REQUEST = %v, want the write's error", err)
	}
	if ls := s.Leases(); len(ls) != 0 {
		t.Fatalf("failed allocation still in memory: %+v", ls)
	}
	held := netip.MustParseAddr("10.80.0.10")
	if _, err := s.HoldAddress("", held, "", time.Minute); !errors.Is(err, disk) {
		t.Fatalf("HoldAddress = %v, want the write's error", err)
	}
	// The hold stays in memory: the next allocation skips the address.
	fail.Store(false)
	l, err := dora(s, "52:54:00:00:00:01", testPool)
	if err != nil || l.Address.String() != "10.80.0.11" {
		t.Fatalf("lease = %v %v, want 10.80.0.11 (10.80.0.10 held)", l.Address, err)
	}
	d := open(t, path)
	if ls := d.Leases(); len(ls) != 2 || !ls[0].Declined || ls[0].Address != held {
		t.Fatalf("on disk: %+v, want the hold of 10.80.0.10 and the lease", ls)
	}
}

// A lease whose allocation is still being written is not handed out by a renewal, and a
// write-through change waits for the group write in flight (writes never overlap).
func TestRenewalWaitsForPendingAllocation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.json")
	s := open(t, path)
	// A recent write: renewals then write nothing of their own.
	if _, err := dora(s, "52:54:00:00:00:99", testPool); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var inFlight atomic.Int32
	swapWriteState(t, s, func(w stateWrite) error {
		if inFlight.Add(1) != 1 {
			t.Error("two writes at once")
		}
		defer inFlight.Add(-1)
		<-release
		return performWrite(w)
	})
	const mac = "52:54:00:00:00:01"
	first := make(chan error, 1)
	go func() { _, err := dora(s, mac, testPool); first <- err }()
	for len(s.Leases()) == 1 { // allocated in memory, write blocked
		time.Sleep(time.Millisecond)
	}
	renewed := make(chan error, 1)
	go func() { _, err := dora(s, mac, testPool); renewed <- err }()
	assigned := make(chan error, 1)
	go func() {
		if _, _, err := s.See("52:54:00:00:00:04", Facts{}); err != nil {
			assigned <- err
			return
		}
		_, err := s.Assign(AssignRequest{Name: "c4", Role: "compute", Address: netip.MustParseAddr("10.80.0.104"), MAC: "52:54:00:00:00:04"})
		assigned <- err
	}()
	select {
	case err := <-renewed:
		t.Fatalf("renewal returned (%v) before the allocation was durable", err)
	case err := <-assigned:
		t.Fatalf("See/Assign returned (%v) while the first write was blocked", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	for _, c := range []chan error{first, renewed, assigned} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
	d := open(t, path)
	if _, err := d.LeaseOf(mac); err != nil {
		t.Fatal(err)
	}
	if _, err := d.NodeByMAC("52:54:00:00:00:04"); err != nil {
		t.Fatal(err)
	}
}

// An OFFER returns while its allocation's write is still blocked, and the REQUEST that follows
// waits for that write: it is ACKed a lease on disk, or, when the write fails, gets the write's
// error and nothing stays allocated.
func TestOfferThenRequestWaitsForTheWrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write error // the allocation's write
	}{
		{"write succeeds", nil},
		{"write fails", errors.New("disk full")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "inventory.json")
			s := open(t, path)
			gate := make(chan struct{})
			swapWriteState(t, s, func(w stateWrite) error {
				<-gate
				if tc.write != nil {
					return tc.write
				}
				return performWrite(w)
			})
			const mac = "52:54:00:00:00:01"
			offer, _, _, err := s.OfferLease(mac, testPool, nil) // returns with the write blocked
			if err != nil || offer.Address != testPool.Start {
				t.Fatalf("offer = %v, %v", offer, err)
			}
			type result struct {
				l   Lease
				err error
			}
			bound := make(chan result, 1)
			go func() {
				l, err := s.BindLease(mac, testPool)
				bound <- result{l, err}
			}()
			select {
			case r := <-bound:
				t.Fatalf("REQUEST returned %v, %v before the offered lease was written", r.l, r.err)
			case <-time.After(50 * time.Millisecond):
			}
			close(gate)
			r := <-bound
			if tc.write != nil {
				if !errors.Is(r.err, tc.write) {
					t.Fatalf("REQUEST = %v, %v; want the write's error", r.l, r.err)
				}
				if ls := s.Leases(); len(ls) != 0 {
					t.Fatalf("leases after the failed write: %+v, want none", ls)
				}
				return
			}
			if r.err != nil || r.l.Address != offer.Address {
				t.Fatalf("REQUEST = %v, %v; want the offered %s", r.l, r.err, offer.Address)
			}
			if got, err := open(t, path).LeaseOf(mac); err != nil || got.Address != r.l.Address {
				t.Fatalf("on disk: %v %v; the REQUEST was ACKed %s", got, err, r.l.Address)
			}
		})
	}
}

// When an offer's write fails, the OFFER's background writer and the REQUEST both take the
// allocation back. The one that comes late must spare the MAC's next allocation (its
// retransmitted DISCOVER's, often the same address, its write not yet done): otherwise that
// client is ACKed an address the inventory no longer holds for it, and the next MAC gets it too.
func TestLateUndoSparesTheNewAllocation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.json")
	s := open(t, path)
	gate := make(chan struct{})
	var writes atomic.Int32
	swapWriteState(t, s, func(w stateWrite) error {
		switch writes.Add(1) {
		case 1:
			return errors.New("disk full")
		case 2:
			<-gate
		}
		return performWrite(w)
	})
	const mac = "52:54:00:00:00:01"
	first, _, _, err := s.OfferLease(mac, testPool, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	firstGen := s.leaseGen[mac]
	s.mu.Unlock()
	waitTakenBack(t, s, mac)
	if _, err := s.BindLease(mac, testPool); err == nil {
		t.Fatal("REQUEST after a failed write succeeded")
	}
	again, fresh, _, err := s.OfferLease(mac, testPool, nil) // the client DISCOVERs again; its write blocks
	if err != nil || !fresh {
		t.Fatalf("second offer = %v fresh=%v, %v; want a new allocation", again, fresh, err)
	}
	s.undoAllocation(first, firstGen) // the first write's other undo, late
	close(gate)
	l, err := s.BindLease(mac, testPool)
	if err != nil || l.Address != again.Address {
		t.Fatalf("REQUEST after the late undo = %v, %v; want %s", l, err, again.Address)
	}
	if other, err := dora(s, "52:54:00:00:00:02", testPool); err != nil || other.Address == l.Address {
		t.Fatalf("another MAC got %s (%v) while %s holds it", other.Address, err, mac)
	}
}

// A REQUEST renewing a lease that is on disk, whose renewal must be written (the last write is
// half a lease old) and cannot be: the REQUEST gets the error (no ACK) and the lease stays, as
// it is on disk.
func TestRenewalWriteFails(t *testing.T) {
	s, c := newStore(t)
	const mac = "52:54:00:00:00:01"
	l, err := dora(s, mac, testPool)
	if err != nil {
		t.Fatal(err)
	}
	s.offers.Wait()
	c.t = c.t.Add(testPool.LeaseTime / 2)
	failingDisk(t, s)
	if got, err := s.BindLease(mac, testPool); err == nil {
		t.Fatalf("REQUEST while the renewal cannot be written = %v, want an error", got)
	}
	if got, err := s.LeaseOf(mac); err != nil || got.Address != l.Address {
		t.Fatalf("lease after the failed renewal = %v, %v; want %s kept", got, err, l.Address)
	}
}

// Every boot script and hello sets a node's state to the one it has: that moves only its
// last-seen time and does not wait for another request's write to end.
func TestSetStateUnchangedDoesNotWaitForWrites(t *testing.T) {
	s, c := newStore(t)
	see(t, s, macA)
	if _, err := s.Assign(req("c4", macA)); err != nil {
		t.Fatal(err)
	}
	before, err := s.SetState("c4", StateBooting)
	if err != nil {
		t.Fatal(err)
	}
	inFlight, release := make(chan struct{}), make(chan struct{})
	swapWriteState(t, s, func(w stateWrite) error {
		close(inFlight)
		<-release // a disk that takes its time
		return performWrite(w)
	})
	var lease sync.WaitGroup
	lease.Go(func() { _, _ = dora(s, "52:54:00:00:01:01", testPool) })
	defer lease.Wait()
	defer close(release)
	<-inFlight

	c.t = c.t.Add(time.Second)
	done := make(chan Node, 1)
	go func() {
		n, err := s.SetState("c4", StateBooting)
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	select {
	case n := <-done:
		if n.State != StateBooting || !n.LastSeen.After(before.LastSeen) {
			t.Errorf("node %+v: want state %s, last seen after %s", n, StateBooting, before.LastSeen)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SetState to the node's own state waited for another request's write")
	}
}

// A node seen again moves its last-seen time in memory, and writes it once the time on disk is
// seenPersistInterval old: through See and through SetState to the state it has.
func TestLastSeenWrittenWhenStale(t *testing.T) {
	for _, tc := range []struct {
		name  string
		again func(*Store) error
	}{
		{"See", func(s *Store) error { _, _, err := s.See(macA, Facts{Serial: "S-" + macA}); return err }},
		{"SetState, same state", func(s *Store) error { _, err := s.SetState("c4", StateBooting); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := newStore(t)
			see(t, s, macA)
			if _, err := s.Assign(req("c4", macA)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.SetState("c4", StateBooting); err != nil {
				t.Fatal(err)
			}
			writes := 0
			swapWriteState(t, s, func(w stateWrite) error { writes++; return performWrite(w) })
			for _, step := range []struct {
				after  time.Duration
				writes int
			}{{time.Second, 0}, {seenPersistInterval, 1}} {
				c.t = c.t.Add(step.after)
				writes = 0
				if err := tc.again(s); err != nil {
					t.Fatal(err)
				}
				if n, err := s.NodeByMAC(macA); err != nil || !n.LastSeen.Equal(c.t) {
					t.Errorf("%v later: node %+v (%v), want last seen %s", step.after, n, err, c.t)
				}
				if writes != step.writes {
					t.Errorf("%v later: %d writes, want %d", step.after, writes, step.writes)
				}
			}
			if n, err := open(t, s.Path()).NodeByMAC(macA); err != nil || !n.LastSeen.Equal(c.t) {
				t.Errorf("on disk: node %+v (%v), want last seen %s", n, err, c.t)
			}
		})
	}
}

// A REQUEST whose OFFER's write failed (in the background, nobody waiting) learns the write's
// error, not merely that its client holds no lease: a full disk must reach the log.
func TestBindLeaseReportsAFailedWrite(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "inventory.json"))
	var failing atomic.Bool
	failing.Store(true)
	swapWriteState(t, s, func(w stateWrite) error {
		if failing.Load() {
			return errors.New("disk full")
		}
		return performWrite(w)
	})
	const mac = "52:54:00:00:00:01"
	if _, _, _, err := s.OfferLease(mac, testPool, nil); err != nil {
		t.Fatal(err)
	}
	waitTakenBack(t, s, mac)
	if _, err := s.BindLease(mac, testPool); err == nil || errors.Is(err, ErrNoLease) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("BindLease after a failed write: %v, want the write's error", err)
	}
	failing.Store(false)
	if _, err := dora(s, "52:54:00:00:00:02", testPool); err != nil { // a write that succeeds
		t.Fatal(err)
	}
	if _, err := s.BindLease(mac, testPool); !errors.Is(err, ErrNoLease) {
		t.Fatalf("BindLease once writes work again: %v, want ErrNoLease", err)
	}
}

// waitTakenBack waits until the OFFER's background write, which fails, has taken mac's
// allocation back.
func waitTakenBack(t *testing.T, s *Store, mac string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := s.LeaseOf(mac); errors.Is(err, ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the allocation whose write failed is still there")
		}
	}
}
