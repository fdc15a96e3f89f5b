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
// within its share, held and err hold's answer. The share is reserved before hold runs (it waits
// for a durable write) and given back when nothing was held, so concurrent takes (a boot storm's
// probes, the scout) cannot all pass the check at once.
func (b *holdBudget) take(mac net.HardwareAddr, a netip.Addr, until time.Time, hold func() (bool, error)) (within, held bool, err error) {
	m := mac.String()
	reserved, ok := b.reserve(m, a, until)
	if !ok {
		return false, false, nil
	}
	if held, err = hold(); !held && reserved {
		b.mu.Lock()
		delete(b.byMAC[m], a)
		b.mu.Unlock()
	}
	return true, held, err
}

// reserve records a hold at a on mac's account when it is within its share (ok); reserved is
// false when a was mac's already (nothing new to give back).
func (b *holdBudget) reserve(mac string, a netip.Addr, until time.Time) (reserved, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.prune(time.Now())
	holds := b.byMAC[mac]
	if _, again := holds[a]; again {
		holds[a] = until
		return false, true
	}
	if len(holds) >= maxHoldsPerMAC {
		return false, false
	}
	if holds == nil {
		holds = map[netip.Addr]time.Time{}
		b.byMAC[mac] = holds
	}
	holds[a] = until
	return true, true
}

// warnOnce reports whether mac's refusal should be logged: once per scoutFresh per MAC.
func (b *holdBudget) warnOnce(mac string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.prune(now)
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
