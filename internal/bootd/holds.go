package bootd

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// maxHoldsPerMAC is how many pool addresses may be held back at once on one MAC's account: found
// answering ARP at them, or declined by it. A router doing proxy ARP answers for every address,
// and a spoofer can answer for them all, or decline every address it gets; either would empty
// the pool. Past the limit that MAC's answers are ignored (the client gets the address, and
// declines it itself if it is really in use) and its declines free the address (SECURITY.md).
const maxHoldsPerMAC = 3

// holdBudget counts the holds made on each MAC's account for as long as they last: a window
// shorter than the hold would let one MAC build up holds window after window.
type holdBudget struct {
	mu     sync.Mutex
	byMAC  map[string]map[netip.Addr]time.Time // when each hold ends
	warned map[string]time.Time                // last "over its share" error, per MAC
}

// take runs hold (which holds a back and reports whether it did) on mac's account, unless mac
// has maxHoldsPerMAC holds already; a hold made lasts until until. within reports whether mac was
// within its share, held and err hold's answer.
func (b *holdBudget) take(mac net.HardwareAddr, a netip.Addr, until time.Time, hold func() (bool, error)) (within, held bool, err error) {
	if !b.within(mac.String(), a) {
		return false, false, nil
	}
	if held, err = hold(); held {
		b.mu.Lock()
		if b.byMAC[mac.String()] == nil {
			b.byMAC[mac.String()] = map[netip.Addr]time.Time{}
		}
		b.byMAC[mac.String()][a] = until
		b.mu.Unlock()
	}
	return true, held, err
}

// within reports whether one more hold at a (none more when a is mac's already) is within mac's
// share.
func (b *holdBudget) within(mac string, a netip.Addr) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.prune(time.Now())
	holds := b.byMAC[mac]
	_, again := holds[a]
	return again || len(holds) < maxHoldsPerMAC
}

// warnOnce reports whether mac's refusal should be logged: once per scoutFresh per MAC.
func (b *holdBudget) warnOnce(mac string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if now.Sub(b.warned[mac]) < scoutFresh {
		return false
	}
	b.warned[mac] = now
	return true
}

// prune drops ended holds and old warnings, so the maps stay as small as the holds that last
// (at most the pool: holds are rare, one per host found in use or decline). Callers hold b.mu.
func (b *holdBudget) prune(now time.Time) {
	if b.byMAC == nil {
		b.byMAC, b.warned = map[string]map[netip.Addr]time.Time{}, map[string]time.Time{}
	}
	for mac, holds := range b.byMAC {
		for a, end := range holds {
			if !now.Before(end) {
				delete(holds, a)
			}
		}
		if len(holds) == 0 {
			delete(b.byMAC, mac)
		}
	}
	for mac, t := range b.warned {
		if now.Sub(t) >= scoutFresh {
			delete(b.warned, mac)
		}
	}
}
