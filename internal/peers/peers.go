// Package peers keeps which nodes serve the chunks of which root image index, so that bootd can
// tell a booting node where else to fetch them; announcements expire unless renewed.
package peers

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// TTL is how long an announcement lasts: nodes renew theirs every TTL/3, so a node that stopped
// serving (powered off, rebooted into another version) leaves the lists within TTL.
const TTL = 90 * time.Second

// MaxList bounds the peers one answer names: enough for a storm to spread over, small enough
// that a list never costs much to send or to try.
const MaxList = 64

// Registry is safe for concurrent use.
type Registry struct {
	mu      sync.Mutex
	byIndex map[string]map[netip.Addr]entry
	now     func() time.Time
}

type entry struct {
	port uint16
	seen time.Time
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{byIndex: map[string]map[netip.Addr]entry{}, now: time.Now}
}

// Announce records that the node at addr serves the chunks of index (the index's sha256) on port.
// A node serves one index at a time: its announcement for another index is forgotten.
func (r *Registry) Announce(index string, addr netip.Addr, port uint16) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for idx, m := range r.byIndex {
		if idx != index {
			delete(m, addr)
		}
	}
	m := r.byIndex[index]
	if m == nil {
		m = map[netip.Addr]entry{}
		r.byIndex[index] = m
	}
	m[addr] = entry{port: port, seen: now}
	r.expire(now)
}

// List returns up to MaxList live peers of index other than exclude, in random order so that
// every node asking spreads its requests differently.
func (r *Registry) List(index string, exclude netip.Addr) []netip.AddrPort {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(r.now())
	var out []netip.AddrPort
	for a, e := range r.byIndex[index] {
		if a != exclude {
			out = append(out, netip.AddrPortFrom(a, e.port))
		}
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	if len(out) > MaxList {
		out = out[:MaxList]
	}
	return out
}

func (r *Registry) expire(now time.Time) {
	for idx, m := range r.byIndex {
		for a, e := range m {
			if now.Sub(e.seen) > TTL {
				delete(m, a)
			}
		}
		if len(m) == 0 {
			delete(r.byIndex, idx)
		}
	}
}
