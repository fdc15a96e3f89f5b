//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// crashConfig is a lab with room for many rounds: a /16, a pool of 768 addresses with hour-long
// leases, so no lease expires and moves during the test.
const crashConfig = `[network]
subnet = "10.80.0.0/16"
[discovery]
pool_start = "10.80.1.0"
pool_end = "10.80.3.255"
lease_time = "1h"
`

// TestCrashSafety kills bootd with SIGKILL at a random moment while clients take discovery
// leases (each one a synced inventory write), netboot (a waiting machine: another write) and
// are assigned through the CLI (another), round after round, restarting it on the same state
// directory each time. After every restart the state loads, every lease a client got an ACK for
// is still that MAC's (and a new DORA gets the same address), every assignment the CLI printed
// is there, and no name, MAC or address is held twice.
func TestCrashSafety(t *testing.T) {
	requirePrereqs(t, "ip", "go")
	rounds := 30
	if s := os.Getenv("CRASH_ROUNDS"); s != "" {
		var err error
		if rounds, err = strconv.Atoi(s); err != nil || rounds < 1 {
			t.Fatalf("CRASH_ROUNDS=%q: want a positive number of rounds", s)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := artifactDir(t)
	lab := newLab(ctx, t, "crash", "10.80.0.1/16")
	bin := filepath.Join(dir, "bootd")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/bootd").CombinedOutput(); err != nil {
		t.Fatalf("build bootd: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "bootd.toml")
	if err := os.WriteFile(cfg, []byte(crashConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	seg := newSegClient(ctx, t, lab, "seg", "02:c0:00:00:00:01", netip.MustParsePrefix("10.80.0.250/16"))
	w := &crashWorkload{seg: seg, leases: map[string]netip.Addr{}, nodes: map[string]inventory.Node{}}
	var logPath string
	defer func() { logTailOnFailure(t, logPath) }()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	var stats crashStats
	for round := 1; round <= rounds && !t.Failed(); round++ {
		b, err := lab.StartBootd(ctx, bin, dir, "--config", cfg)
		if err != nil {
			t.Fatalf("round %d: bootd does not start on the state it left: %v", round, err)
		}
		logPath = b.Proc.LogPath
		w.b = b
		if err := w.check(ctx); err != nil {
			t.Fatalf("round %d, after %d kills: %v", round, round-1, err)
		}
		killAfter := time.Duration(20+rng.IntN(1500)) * time.Millisecond
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() { w.run(ctx, stop, g) })
		}
		time.Sleep(killAfter)
		if round%2 == 0 {
			// Every other round the kill waits for an assign under way, and lands a random few
			// milliseconds into it: before, during or after its inventory write.
			for i := 0; i < 3000 && w.assigns.Load() == 0; i++ {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(time.Duration(rng.IntN(15000)) * time.Microsecond)
		}
		dhcpHTTP, assigns := w.inflight.Load(), w.assigns.Load()
		b.Proc.Kill()
		_ = b.Proc.Wait(ctx)
		close(stop)
		wg.Wait()
		stats.add(killAfter, dhcpHTTP, assigns)
	}
	// The state the last kill left.
	b, err := lab.StartBootd(ctx, bin, dir, "--config", cfg)
	if err != nil {
		t.Fatalf("bootd does not start after the last kill: %v", err)
	}
	w.b = b
	if err := w.check(ctx); err != nil {
		t.Fatalf("after %d kills: %v", rounds, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Without acknowledged leases and assignments the checks above had nothing to check.
	if len(w.leases) == 0 || len(w.nodes) == 0 {
		t.Fatalf("the workload got %d leases and %d assignments acknowledged (%d assigns failed): nothing was checked across the kills",
			len(w.leases), len(w.nodes), w.failedAssigns)
	}
	t.Logf("%d SIGKILLs at %s..%s into each round's load: %d with DHCP exchanges or netboots in flight, %d with a CLI assign in flight (%d operations cut in all); acknowledged and checked after every restart: %d leases (DORA), %d assignments (CLI); %d renewals gave the same address; %d assigns failed (cut by the kill, or sent to the dead bootd)",
		rounds, stats.min.Round(time.Millisecond), stats.max.Round(time.Millisecond), stats.duringLease, stats.duringAssn, stats.ops, len(w.leases), len(w.nodes), w.renewed, w.failedAssigns)
}

// crashStats says where the kills landed.
type crashStats struct {
	min, max                time.Duration
	duringLease, duringAssn int // kills with a DHCP exchange or netboot, or a CLI assign, in flight
	ops                     int
}

func (s *crashStats) add(d time.Duration, leases, assigns int64) {
	if s.min == 0 || d < s.min {
		s.min = d
	}
	s.max = max(s.max, d)
	if leases > 0 {
		s.duringLease++
	}
	if assigns > 0 {
		s.duringAssn++
	}
	s.ops += int(leases + assigns)
}

// crashWorkload is what the clients were told: ACKed leases and assignments the CLI confirmed.
type crashWorkload struct {
	b        *vlab.Bootd
	seg      *segClient
	next     atomic.Int64 // MAC series counter
	inflight atomic.Int64 // DHCP exchanges and netboots under way
	assigns  atomic.Int64 // CLI assigns under way

	mu            sync.Mutex
	leases        map[string]netip.Addr     // MAC -> address ACKed
	waiting       []net.HardwareAddr        // netbooted, not yet assigned
	nodes         map[string]inventory.Node // name -> the assignment the CLI printed
	nextName      int
	renewed       int
	failedAssigns int
}

var assignedRE = regexp.MustCompile(`^(\S+) is (\S+): (\S+), address (\S+);`)

// run is one client goroutine: new leases, netboots, assigns and renewals, until stop.
func (w *crashWorkload) run(ctx context.Context, stop <-chan struct{}, g int) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		switch {
		case (g == 0 || g == 3) && w.assign(ctx):
		case g == 1 && i%3 == 2:
			w.renew(ctx)
		default:
			mac := seqMAC(0xc1, int(w.next.Add(1)))
			w.inflight.Add(1)
			a, err := w.seg.netboot(ctx, mac)
			w.inflight.Add(-1)
			w.mu.Lock()
			if a.IsValid() {
				w.leases[mac.String()] = a // the ACK came: the lease must survive
			}
			if err == nil {
				w.waiting = append(w.waiting, mac)
			}
			w.mu.Unlock()
			if err != nil {
				return // bootd is gone
			}
		}
	}
}

// assign names one waiting machine through the CLI; false when none waits.
func (w *crashWorkload) assign(ctx context.Context) bool {
	w.mu.Lock()
	if len(w.waiting) == 0 || w.nextName >= 99 {
		w.mu.Unlock()
		return false
	}
	mac := w.waiting[0]
	w.waiting = w.waiting[1:]
	w.nextName++
	name := fmt.Sprintf("c%d", w.nextName)
	w.mu.Unlock()
	w.assigns.Add(1)
	out, err := w.b.CLI(ctx, "assign", name, "--mac", mac.String())
	w.assigns.Add(-1)
	m := assignedRE.FindStringSubmatch(out)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil || m == nil {
		w.failedAssigns++
		// The kill may have come after the write and before the answer: the machine may or may
		// not be c<name> now; check and the next round find out. Either is correct.
		return true
	}
	w.nodes[name] = inventory.Node{Name: name, MAC: m[1], Role: m[3], Address: netip.MustParseAddr(m[4])}
	return true
}

// renew runs a DORA for a MAC that got an ACK before: it must get the same address.
func (w *crashWorkload) renew(ctx context.Context) {
	w.mu.Lock()
	var mac string
	var want netip.Addr
	for _, m := range w.waiting { // netbooted, not assigned (a cut-off assign is caught below)
		mac, want = m.String(), w.leases[m.String()]
	}
	w.mu.Unlock()
	if mac == "" {
		return
	}
	w.inflight.Add(1)
	a, err := w.seg.dora(ctx, mustMAC(mac))
	w.inflight.Add(-1)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// A pool address other than the one ACKed is a lost lease; a node address means an assign
	// that the kill cut off before the CLI printed it did happen, which is fine.
	if a != want && a.As4()[2] != 0 {
		w.leases["RENEWAL-MISMATCH "+mac] = a
	}
	w.renewed++
}

// check compares bootd's inventory with what clients were told.
func (w *crashWorkload) check(ctx context.Context) error {
	r, err := w.b.Nodes(ctx)
	if err != nil {
		return err
	}
	if err := uniqueInventory(r.Nodes, r.Leases); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	leases := map[string]netip.Addr{}
	for _, l := range r.Leases {
		if !l.Declined {
			leases[l.MAC] = l.Address
		}
	}
	for mac, a := range w.leases {
		if len(mac) > 17 {
			return fmt.Errorf("%s: a second DORA got %s, not the address ACKed before", mac, a)
		}
		if leases[mac] != a {
			return fmt.Errorf("lease lost: %s was ACKed %s, the inventory says %v", mac, a, leases[mac])
		}
	}
	nodes := map[string]inventory.Node{}
	for _, n := range r.Nodes {
		nodes[n.Name] = n
	}
	for name, want := range w.nodes {
		got, ok := nodes[name]
		if !ok || got.MAC != want.MAC || got.Address != want.Address || got.Role != want.Role {
			return fmt.Errorf("assignment lost: the CLI said %s is %s (%s), the inventory has %+v", want.MAC, name, want.Address, got)
		}
	}
	// Machines assigned by a request the kill cut off are nodes now: do not assign them again.
	for _, n := range r.Nodes {
		for i, m := range w.waiting {
			if m.String() == n.MAC {
				w.waiting = append(w.waiting[:i], w.waiting[i+1:]...)
				break
			}
		}
	}
	return nil
}
