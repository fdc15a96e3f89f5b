package vlab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NamePrefix starts the name of every namespace a Lab creates, so a lab's
// namespaces are recognisable and never mistaken for someone else's.
const NamePrefix = "vlab-"

// cleanupTimeout bounds each teardown step of Close.
const cleanupTimeout = 10 * time.Second

// Lab is one network namespace holding a bridge with an address, and the
// processes and VMs started in it.
type Lab struct {
	Name   string       // network namespace name, always starting with NamePrefix
	Bridge string       // bridge inside the namespace ("br0")
	Addr   netip.Prefix // bridge address, e.g. 10.80.0.1/24

	mu      sync.Mutex
	created bool // the namespace exists and is ours to delete
	closed  bool
	procs   []*Process
	taps    []string
	hosts   []string // namespaces of the hosts (AddHost)
	nextTap int
}

// New creates the namespace (loopback up) and a bridge br0 with addr in it.
// A name without NamePrefix gets it prepended. The namespace must not exist
// yet: New never adopts a namespace it did not create. On failure everything
// already made is removed again.
func New(ctx context.Context, name string, addr netip.Prefix) (*Lab, error) {
	if !strings.HasPrefix(name, NamePrefix) {
		name = NamePrefix + name
	}
	if !addr.IsValid() || !addr.Addr().Is4() {
		return nil, fmt.Errorf("vlab: bridge address %v: want an IPv4 prefix", addr)
	}
	l := &Lab{Name: name, Bridge: "br0", Addr: addr}
	if err := run(ctx, "ip", "netns", "add", name); err != nil {
		return nil, fmt.Errorf("vlab: create namespace: %w", err)
	}
	l.created = true
	steps := [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", l.Bridge, "type", "bridge"},
		{"ip", "addr", "add", addr.String(), "dev", l.Bridge},
		{"ip", "link", "set", l.Bridge, "up"},
		// Strict reverse-path filtering on the lab side, as the README asks of an appliance: the
		// boots are tested under it. conf/all comes from the host and the higher value counts.
		{"sh", "-c", "echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter && echo 1 > /proc/sys/net/ipv4/conf/" + l.Bridge + "/rp_filter"},
	}
	for _, s := range steps {
		if err := l.run(ctx, s...); err != nil {
			return nil, errors.Join(fmt.Errorf("vlab: set up %s: %w", name, err), l.Close())
		}
	}
	return l, nil
}

// Command returns a command that runs inside the lab's namespace.
func (l *Lab) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", l.Name, name}, args...)...)
}

// run runs a command inside the namespace and folds its output into the error.
func (l *Lab) run(ctx context.Context, args ...string) error {
	return run(ctx, "ip", append([]string{"netns", "exec", l.Name}, args...)...)
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Close kills the lab's VMs and processes, removes its taps and deletes the
// namespace. It is idempotent, and safe on a nil Lab or after New failed
// half way.
func (l *Lab) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	for _, p := range l.procs {
		p.Kill()
	}
	for _, p := range l.procs {
		p.waitTimeout(cleanupTimeout)
	}
	if !l.created {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var errs []error
	for _, tap := range l.taps {
		if err := l.run(ctx, "ip", "link", "del", tap); err != nil {
			errs = append(errs, err)
		}
	}
	for _, h := range l.hosts {
		// Deleting a host's namespace deletes its veth pair too.
		_ = killNetns(ctx, h)
		if err := run(ctx, "ip", "netns", "delete", h); err != nil {
			errs = append(errs, err)
		}
	}
	l.killStragglers(ctx)
	if err := run(ctx, "ip", "netns", "delete", l.Name); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("vlab: close %s: %w", l.Name, err)
	}
	return nil
}

// killStragglers kills whatever still runs in the namespace (children that
// left our process groups); the namespace is ours, so its processes are too.
func (l *Lab) killStragglers(ctx context.Context) { _ = killNetns(ctx, l.Name) }

// killNetns kills every process in network namespace ns.
func killNetns(ctx context.Context, ns string) error {
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
	if err != nil {
		return err
	}
	for _, f := range strings.Fields(string(out)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

// track registers a process for Close; it refuses once the lab is closed.
func (l *Lab) track(p *Process) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("vlab: lab is closed")
	}
	l.procs = append(l.procs, p)
	return nil
}

// Start runs a command in the background inside the namespace, in its own
// process group, with stdout and stderr appended to logPath. Cancelling ctx
// or closing the lab kills the whole process group.
func (l *Lab) Start(ctx context.Context, logPath string, name string, args ...string) (*Process, error) {
	return l.start(logPath, l.Command(ctx, name, args...))
}

// StartHere is Start in the calling process's own namespace, for a lab that is only a set of
// processes to stop (a zero Lab): Close kills them.
func (l *Lab) StartHere(ctx context.Context, logPath string, name string, args ...string) (*Process, error) {
	return l.start(logPath, exec.CommandContext(ctx, name, args...))
}

// start runs cmd (a command made with ctx) as Start describes.
func (l *Lab) start(logPath string, cmd *exec.Cmd) (*Process, error) {
	name := cmd.String()
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("vlab: open log: %w", err)
	}
	defer log.Close() // the child holds its own copy
	cmd.Stdout, cmd.Stderr = log, log
	// Own group so Close can kill children too; Pdeathsig so a test binary
	// killed by its -timeout panic (no cleanups run) takes QEMU with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = cleanupTimeout
	p := &Process{Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	if err := l.track(p); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		close(p.done)
		return nil, fmt.Errorf("vlab: start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Process is a background command started by Lab.Start.
type Process struct {
	Cmd     *exec.Cmd
	LogPath string

	done chan struct{}
	err  error
}

// Wait waits until the process exits or ctx ends, and returns its exit error.
func (p *Process) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill kills the process's whole group; it does not wait.
func (p *Process) Kill() {
	if p.Cmd.Process == nil || p.Exited() {
		return
	}
	_ = killGroup(p.Cmd.Process.Pid)
}

func (p *Process) waitTimeout(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = p.Wait(ctx)
}

// killGroup kills a process group; Start makes every process a group leader,
// so the group id is the pid ("ip netns exec" execs in place).
func killGroup(pid int) error {
	return syscall.Kill(-pid, syscall.SIGKILL)
}
