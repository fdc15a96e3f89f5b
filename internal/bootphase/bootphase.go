// Package bootphase tracks the machines between their DHCP lease and their first HTTP request:
// the boot work (DHCP, TFTP, iPXE's own DHCP) that a server's image downloads should yield to.
package bootphase

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPatience is how long a machine counts as booting after its lease without asking HTTP:
// a PXE ROM's TFTP and iPXE's DHCP take seconds; a machine that never asks (a made-up MAC, a
// firmware that gave up) stops counting after this.
const DefaultPatience = 30 * time.Second

// Tracker holds the addresses of the machines leased as netbooting clients that have not asked
// HTTP yet, each until its patience runs out. It is safe for concurrent use. The zero value is
// not usable: see New.
type Tracker struct {
	patience time.Duration
	start    time.Time        // deadlines count from here, on the monotonic clock (immune to clock steps)
	now      func() time.Time // for tests

	mu      sync.Mutex
	pending map[netip.Addr]time.Duration // a booting machine's address → when it stops counting
	// until is the latest deadline in pending (0: none), so that Booting, which each download's
	// send asks, reads one word instead of taking the lock.
	until atomic.Int64
}

// New returns a Tracker whose machines count as booting for patience after their lease.
func New(patience time.Duration) *Tracker {
	return &Tracker{patience: patience, start: time.Now(), now: time.Now, pending: map[netip.Addr]time.Duration{}}
}

// Leased records that the machine at a got a lease as a netbooting client.
func (t *Tracker) Leased(a netip.Addr) {
	deadline := t.elapsed() + t.patience
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.Booting() {
		clear(t.pending) // all past their patience: a storm's or a flood's leftovers go here
	}
	t.pending[a] = deadline
	t.until.Store(max(t.until.Load(), int64(deadline)))
}

// Asked records an HTTP request from a: the machine there has reached its boot script.
func (t *Tracker) Asked(a netip.Addr) {
	if !t.Booting() {
		return // the common case, every request after a storm: no lock (the next lease clears the table)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.pending[a]; !ok {
		return
	}
	delete(t.pending, a)
	t.prune()
}

// prune drops the machines past their deadline and stores the latest deadline left.
func (t *Tracker) prune() {
	now := t.elapsed()
	var latest time.Duration
	for a, d := range t.pending {
		if d <= now {
			delete(t.pending, a)
			continue
		}
		latest = max(latest, d)
	}
	t.until.Store(int64(latest))
}

// Booting reports whether some machine leased within its patience has not asked HTTP yet.
func (t *Tracker) Booting() bool {
	return t.elapsed() < time.Duration(t.until.Load())
}

func (t *Tracker) elapsed() time.Duration { return t.now().Sub(t.start) }
