package bootphase

import (
	"net/netip"
	"sync"
	"testing"
	"time"
)

// clocked is a Tracker on a clock the test moves: at is the time since its start.
type clocked struct {
	*Tracker
	at time.Duration
}

func newClocked(patience time.Duration) *clocked {
	c := &clocked{Tracker: New(patience)}
	start := time.Date(2026, 11, 23, 4, 0, 0, 0, time.UTC)
	c.start, c.now = start, func() time.Time { return start.Add(c.at) }
	return c
}

// machine is the i-th address of a storm's machines.
func machine(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 80, 1, byte(i)}) }

// step is one event on a Tracker with a clock the test moves.
type step struct {
	at     time.Duration // since the start
	leased string        // an address leased at this time, or
	asked  string        // an address that asked HTTP
}

func TestBooting(t *testing.T) {
	const patience = 30 * time.Second
	a, b := "10.80.0.100", "10.80.0.101"
	for _, tc := range []struct {
		name  string
		steps []step
		check time.Duration // when Booting is asked, after the steps
		want  bool
	}{
		{"nothing leased", nil, 0, false},
		{"leased, not asked yet", []step{{leased: a}}, time.Second, true},
		{"leased, then asked", []step{{leased: a}, {at: time.Second, asked: a}}, time.Second, false},
		{"another address asked", []step{{leased: a}, {asked: b}}, time.Second, true},
		{"one of two asked", []step{{leased: a}, {leased: b}, {asked: a}}, time.Second, true},
		{"both asked", []step{{leased: a}, {leased: b}, {asked: b}, {asked: a}}, time.Second, false},
		{"never asked, past its patience", []step{{leased: a}}, patience, false},
		{"just within its patience", []step{{leased: a}}, patience - time.Nanosecond, true},
		{"a lease again restarts the patience", []step{{leased: a}, {at: 20 * time.Second, leased: a}}, 40 * time.Second, true},
		// a's deadline is the later one until a asks; then b's, which has passed, counts no more.
		{"the one left is past its patience", []step{{leased: b}, {at: 20 * time.Second, leased: a}, {at: 40 * time.Second, asked: a}}, 40 * time.Second, false},
		// b's deadline was stored as the latest when it was leased; a asking must not shorten it.
		{"an earlier machine asks", []step{{leased: a}, {at: 20 * time.Second, leased: b}, {at: 25 * time.Second, asked: a}}, 40 * time.Second, true},
		{"asked before it was leased", []step{{asked: a}, {leased: a}}, time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newClocked(patience)
			for _, s := range tc.steps {
				tr.at = s.at
				if s.leased != "" {
					tr.Leased(netip.MustParseAddr(s.leased))
				}
				if s.asked != "" {
					tr.Asked(netip.MustParseAddr(s.asked))
				}
			}
			tr.at = tc.check
			if got := tr.Booting(); got != tc.want {
				t.Errorf("Booting() = %v, want %v", got, tc.want)
			}
		})
	}
}

// Machines that never ask do not stay in the table: the first lease after all their patience
// has run out clears it, and a request drops those past it while others still boot. So a flood
// of leases to made-up MACs leaves nothing behind, and the table never holds more than the
// addresses leased within one patience.
func TestExpiredDropped(t *testing.T) {
	t.Run("a lease after every patience ran out", func(t *testing.T) {
		tr := newClocked(time.Second)
		for i := range 200 {
			tr.Leased(machine(i))
		}
		tr.at = 2 * time.Second
		tr.Asked(netip.MustParseAddr("10.80.0.9")) // nobody booting: no lock, nothing dropped
		tr.Leased(netip.MustParseAddr("10.80.0.5"))
		if n := len(tr.pending); n != 1 {
			t.Errorf("%d machines held after the storm's patience and one new lease, want 1", n)
		}
	})
	t.Run("a request while others still boot", func(t *testing.T) {
		tr := newClocked(time.Second)
		for i := range 100 {
			tr.Leased(machine(i))
		}
		tr.at = 500 * time.Millisecond
		last := netip.MustParseAddr("10.80.0.5")
		tr.Leased(last) // still booting when the others have expired
		tr.at = 1200 * time.Millisecond
		tr.Asked(machine(0))
		if n := len(tr.pending); n != 1 {
			t.Errorf("%d machines held after the others' patience, want 1 (%s)", n, last)
		}
		if !tr.Booting() {
			t.Errorf("Booting() = false, want true: %s is within its patience", last)
		}
	})
}

// When one machine asks, the others still booting count until the last of their deadlines, not
// until any one's.
func TestLatestDeadlineCounts(t *testing.T) {
	tr := newClocked(100 * time.Second)
	for i := range 50 { // one a second: deadlines 100 s to 149 s
		tr.at = time.Duration(i) * time.Second
		tr.Leased(machine(i))
	}
	for i := range 10 { // ten machines ask in turn: each prune walks the table in its own order
		tr.at = 50 * time.Second
		tr.Asked(machine(i))
		tr.at = 148 * time.Second
		if !tr.Booting() {
			t.Fatalf("Booting() = false at 148 s after 10.80.1.%d asked, want true: 10.80.1.49 counts until 149 s", i)
		}
	}
}

// Leases, requests and the downloads' questions at once, from many goroutines (run with -race):
// every machine asks in the end, so none is booting.
func TestConcurrentUse(t *testing.T) {
	tr := New(time.Minute)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				a := netip.AddrFrom4([4]byte{10, 80, byte(i), byte(j)})
				tr.Leased(a)
				_ = tr.Booting()
				tr.Asked(a)
			}
		})
	}
	wg.Wait()
	if tr.Booting() {
		t.Errorf("booting after every machine asked (%d left)", len(tr.pending))
	}
}
