package vcluster

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long Stop waits after SIGTERM before it kills, as systemd's TimeoutStopSec
// does (shorter: the daemons here stop in well under a second).
const stopGrace = 10 * time.Second

// Stop stops the node's unit ("munge", "slurmd", ...) as `systemctl stop` would: SIGTERM to its
// main process, SIGKILL once the grace period is over. A stopped unit is not a failure for
// WaitIdle; Start starts it again.
func (n *Node) Stop(ctx context.Context, name string) error {
	n.cluster.mu.Lock()
	i := slices.IndexFunc(n.daemons, func(d *daemon) bool { return d.unit == name })
	if i < 0 {
		n.cluster.mu.Unlock()
		return fmt.Errorf("vcluster: %s runs no %s", n.Name, name)
	}
	d := n.daemons[i]
	n.daemons = slices.Delete(n.daemons, i, i+1)
	n.cluster.mu.Unlock()
	// The daemon is nsenter's child: nsenter forks to enter the node's PID namespace.
	for _, pid := range children(d.cmd.Process.Pid) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
	case <-time.After(stopGrace):
	}
	_ = d.cmd.Process.Kill()
	for _, pid := range children(d.cmd.Process.Pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(stepTimeout):
		return fmt.Errorf("vcluster: %s on %s did not stop", name, n.Name)
	}
}

// Start starts one of the units the node's role enables, after Stop, with its files as they are
// now (a changed key, a changed EnvironmentFile), and waits until it is ready.
func (n *Node) Start(ctx context.Context, name string) error {
	units := unitsFor(n.Role, n.journal)
	i := slices.IndexFunc(units, func(u unit) bool { return u.name == name })
	if i < 0 {
		return fmt.Errorf("vcluster: role %q of %s has no unit %s", n.Role, n.Name, name)
	}
	n.cluster.mu.Lock()
	running := slices.ContainsFunc(n.daemons, func(d *daemon) bool { return d.unit == name })
	n.cluster.mu.Unlock()
	if running {
		return fmt.Errorf("vcluster: %s runs %s already", n.Name, name)
	}
	return n.startUnit(ctx, units[i])
}

// Restart is Stop, then Start: what `systemctl restart` does.
func (n *Node) Restart(ctx context.Context, name string) error {
	if err := n.Stop(ctx, name); err != nil {
		return err
	}
	return n.Start(ctx, name)
}

// children lists the child processes of pid.
func children(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}
