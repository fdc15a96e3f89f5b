package bootd

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/inventory"
)

// gatedProber is fakeProber whose re-probes wait for gate to close, then find squatter at
// every address.
type gatedProber struct {
	*fakeProber
	gate     chan struct{}
	squatter net.HardwareAddr
}

func (p *gatedProber) Reprobe(context.Context, netip.Addr, time.Duration) (net.HardwareAddr, error) {
	<-p.gate
	return p.squatter, nil
}

// stop waits for a re-probe still in flight, and then writes the count of the over-share lines
// the rate limiter held back, the re-probe's among them: without the wait, that line would come
// after the Flush; without the Flush, its count would wait for a window bootd no longer lives to
// see end.
func TestStopWaitsForTheScoutThenFlushes(t *testing.T) {
	p := &fakeProber{taken: map[netip.Addr]net.HardwareAddr{}}
	for i := range inventory.MaxHoldsPerMAC + 1 { // one more than its share
		p.taken[netip.AddrFrom4([4]byte{10, 80, 0, byte(200 + i)})] = squatterMAC
	}
	d, hook := scoutDaemon(t, p)
	d.scout.round(t.Context()) // holds its share, and logs the first over-share line at once
	if n := namedIn(hook, logrus.ErrorLevel, "mac", squatterMAC.String()); n != 1 {
		t.Fatalf("after the sweep, %d errors name the squatter as over its share, want 1", n)
	}
	gp := &gatedProber{fakeProber: p, gate: make(chan struct{}), squatter: squatterMAC}
	release := sync.OnceFunc(func() { close(gp.gate) })
	t.Cleanup(release)
	d.probe = gp

	const client = "52:54:00:00:00:09"
	offered := lease(t, d, client, false).IP // a vouched address: re-probed in the background, held at the gate
	stopped := make(chan struct{})
	go func() {
		d.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("stop returned while a re-probe was still in flight")
	case <-time.After(100 * time.Millisecond):
	}
	release() // the re-probe finds the squatter, over its share: a second line in the window, held back
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not return once the re-probe was done")
	}
	n := 0
	var log []string
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.ErrorLevel && e.Data["mac"] == squatterMAC.String() && e.Data["held_back"] == 1 && e.Data["address"] == offered {
			n++
		}
		log = append(log, fmt.Sprintf("%s %v %.40q", e.Level, e.Data, e.Message))
	}
	if n != 1 {
		t.Fatalf("after stop, %d over-share lines with held_back=1, want 1 naming %s (the re-probe's, flushed); log:\n%s", n, offered, strings.Join(log, "\n"))
	}
}
