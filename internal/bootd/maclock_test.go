package bootd

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// One lookup per MAC at a time, different MACs at once, and no entry left once they are done.
func TestMACLocks(t *testing.T) {
	var m macLocks
	var running [3]atomic.Int32
	var overlap atomic.Bool
	var wg sync.WaitGroup
	for i := range 60 {
		mac := i % 3
		wg.Go(func() {
			unlock := m.lock(fmt.Sprintf("52:54:00:00:00:%02x", mac))
			defer unlock()
			if running[mac].Add(1) > 1 {
				overlap.Store(true)
			}
			defer running[mac].Add(-1)
			for range 1000 { // some work while held
				_ = fmt.Sprint(mac)
			}
		})
	}
	wg.Wait()
	if overlap.Load() {
		t.Error("two lookups of one MAC ran at once")
	}
	if n := len(m.held); n != 0 {
		t.Errorf("%d entries left after every lookup ended, want none", n)
	}
}

// waitLocked waits until a lease lookup of mac holds its lock (one started in another goroutine).
func waitLocked(t *testing.T, d *daemon, mac string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		d.leasing.mu.Lock()
		l := d.leasing.held[mac]
		d.leasing.mu.Unlock()
		if l != nil && !l.TryLock() {
			return
		} else if l != nil {
			l.Unlock()
		}
	}
	t.Fatalf("no lookup of %s took its lock", mac)
}
