package vlab

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
)

// Host is a plain machine on the lab's segment: its own network namespace with one interface,
// eth0, cabled to the lab's bridge. Tests use hosts where a whole VM is not needed (a DHCP
// client, an impostor).
type Host struct {
	Name string // the namespace: <lab>-<name>
	Peer string // the lab's end of its cable (a veth on the bridge, in the lab's namespace)
	lab  *Lab
}

// AddHost creates a host with MAC mac on the lab's bridge; Close removes it.
func (l *Lab) AddHost(ctx context.Context, name string, mac net.HardwareAddr) (*Host, error) {
	l.mu.Lock()
	peer := fmt.Sprintf("h%d", l.nextTap)
	h := &Host{Name: l.Name + "-" + name, Peer: peer, lab: l}
	l.nextTap++
	l.hosts = append(l.hosts, h.Name)
	l.mu.Unlock()
	steps := [][]string{
		{"ip", "netns", "add", h.Name},
		{"ip", "-n", h.Name, "link", "set", "lo", "up"},
		{"ip", "-n", h.Name, "link", "add", "eth0", "address", mac.String(), "type", "veth", "peer", "name", peer, "netns", l.Name},
		{"ip", "-n", h.Name, "link", "set", "eth0", "up"},
		{"ip", "-n", l.Name, "link", "set", peer, "master", l.Bridge},
		{"ip", "-n", l.Name, "link", "set", peer, "up"},
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return nil, fmt.Errorf("vlab: host %s: %w", name, err)
		}
	}
	return h, nil
}

// Command runs a command inside the host.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// Start runs a command in the background inside the host, as Lab.Start does in the lab's
// namespace: its output appended to logPath, its process group killed when ctx ends or the lab
// closes.
func (h *Host) Start(ctx context.Context, logPath, name string, args ...string) (*Process, error) {
	return h.lab.start(logPath, h.Command(ctx, name, args...))
}

// Run runs a command inside the host and returns its combined output.
func (h *Host) Run(ctx context.Context, name string, args ...string) (string, error) {
	out, err := h.Command(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// KillAll kills every process in the host's namespace (those it started in sessions of their
// own too), leaving the host cabled.
func (h *Host) KillAll(ctx context.Context) error { return killNetns(ctx, h.Name) }

// Close unplugs the host: whatever runs in it is killed and its namespace deleted, which takes
// its link to the bridge with it. The lab's Close then leaves it alone.
func (h *Host) Close(ctx context.Context) error {
	l := h.lab
	l.mu.Lock()
	i := slices.Index(l.hosts, h.Name)
	if i >= 0 {
		l.hosts = slices.Delete(l.hosts, i, i+1)
	}
	l.mu.Unlock()
	if i < 0 {
		return nil // closed already, with the lab or by an earlier Close
	}
	_ = killNetns(ctx, h.Name)
	if err := run(ctx, "ip", "netns", "delete", h.Name); err != nil {
		return fmt.Errorf("vlab: host %s: %w", h.Name, err)
	}
	return nil
}
