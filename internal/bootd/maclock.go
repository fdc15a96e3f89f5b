package bootd

import "sync"

// macLocks runs one lease lookup per MAC at a time: a client that retransmits its DISCOVER while
// its new address is being probed waits for that probe and then renews the probed address,
// instead of being offered it unprobed; a REQUEST that comes meanwhile waits for it too. An
// entry lives only while its MAC's lookups run or wait, so made-up MACs leave nothing behind.
type macLocks struct {
	mu   sync.Mutex
	held map[string]*macLock
}

type macLock struct {
	sync.Mutex
	users int // the lookups that hold it or wait for it
}

// lock returns once mac's lookups are the caller's alone, and the function that ends that.
func (m *macLocks) lock(mac string) (unlock func()) {
	m.mu.Lock()
	if m.held == nil {
		m.held = map[string]*macLock{}
	}
	l := m.held[mac]
	if l == nil {
		l = &macLock{}
		m.held[mac] = l
	}
	l.users++
	m.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		m.mu.Lock()
		if l.users--; l.users == 0 {
			delete(m.held, mac)
		}
		m.mu.Unlock()
	}
}
