package vcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// NodeFiles is what one node receives: its name (the namespace and host name), its role
// ("master", "compute", or "" for munge alone), its address on the bridge and its files.
type NodeFiles struct {
	Name, Role string
	Addr       netip.Prefix
	MAC        net.HardwareAddr // of its eth0; nil: the kernel's random one
	Files      []File
	// Devices are stand-in device nodes the node's /dev has besides the common ones (a GPU's
	// /dev/nvidia0): with any, the node gets a /dev of its own (see setupDev).
	Devices []Device
	// Journal gives the node a systemd-journald of its own, started before its other units, as
	// every Rocky node runs one: the node's /dev (its own) has /dev/log pointing at it, so what a
	// daemon logs through syslog(3) lands there, and its /var/log/journal is a fresh tmpfs, so a
	// journal reader (journalctl, fail2ban) sees the node's journal alone, never the host's.
	Journal bool
}

// Device is a character device node made with mknod in a node's own /dev. Nothing needs to
// drive it: opening it fails, stat (what slurmd does with gres.conf's File=) works.
type Device struct {
	Path         string // under /dev
	Major, Minor uint32
}

// Node is one running node.
type Node struct {
	Name, Role string
	Addr       netip.Prefix
	MAC        net.HardwareAddr // as asked in NodeFiles; nil: random
	Dir        string           // overlay layers, init spec and daemon logs

	cluster *Cluster
	journal bool   // runs its own systemd-journald (NodeFiles.Journal)
	veth    string // hub end of the node's link
	netns   bool   // the network namespace is ours to delete
	init    *exec.Cmd
	initErr chan error
	daemons []*daemon
	exports map[string]string // exported path -> its host directory (share.go); under cluster.mu
}

// nodePath is PATH inside a node.
const nodePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func (n *Node) start(ctx context.Context, files []File, devices []Device) error {
	n.Dir = filepath.Join(n.cluster.cfg.Dir, n.Name)
	// Every start is a boot from scratch: a netbooted node's root is fresh, so is its upper layer.
	for _, d := range []string{"upper", "work"} {
		if err := os.RemoveAll(filepath.Join(n.Dir, d)); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return err
	}
	binds, err := n.cluster.shares(n, files)
	if err != nil {
		return err
	}
	spec, err := stage("/", n.Dir, n.Name, n.cluster.cfg.Accounts, files, binds)
	if err != nil {
		return err
	}
	if err := spec.addDevices(n.Dir, devices, n.journal); err != nil {
		return err
	}
	if n.journal {
		spec.Tmpfs = append(spec.Tmpfs, journalDir)
	}
	if err := n.network(ctx); err != nil {
		return err
	}
	if err := n.startInit(ctx, spec); err != nil {
		return err
	}
	for _, u := range unitsFor(n.Role, n.journal) {
		if err := n.startUnit(ctx, u); err != nil {
			return err
		}
	}
	return nil
}

// network creates the node's namespace and links it to the hub's bridge as eth0.
func (n *Node) network(ctx context.Context) error {
	ns := netnsName(n.Name)
	if err := run(ctx, "ip", "netns", "add", ns); err != nil {
		return err
	}
	n.netns = true
	hub := n.cluster.hub
	peer := []string{"peer", "name", "eth0"}
	if n.MAC != nil {
		peer = append(peer, "address", n.MAC.String())
	}
	steps := [][]string{
		append(append([]string{"ip", "-n", hub.Name, "link", "add", n.veth, "type", "veth"}, peer...), "netns", ns),
		{"ip", "-n", hub.Name, "link", "set", n.veth, "master", hub.Bridge, "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", n.Addr.String(), "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

// startInit starts the node's PID 1 (this binary, see init.go) in the node's network namespace
// and fresh PID, mount, UTS, IPC and time namespaces, and waits until it has mounted the node's
// files.
func (n *Node) startInit(ctx context.Context, spec *initSpec) error {
	specPath := filepath.Join(n.Dir, "init.json")
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := os.WriteFile(specPath, b, 0o600); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(n.Dir, "init.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	// nsenter, not "ip netns exec": that one remounts /sys, which hides the host's cgroup
	// mounts slurmd's cgroup plugin insists on finding. unshare gives the node a time namespace
	// whose uptime starts now, as a boot's does: slurmd reports its boot time from it, and
	// slurmctld takes a node it powered up for resumed only once it booted after the request.
	boot, err := bootOffset()
	if err != nil {
		return err
	}
	cmd := exec.Command("nsenter", "--net=/run/netns/"+netnsName(n.Name), "--",
		"unshare", "--time", "--boottime", boot, "--", self)
	cmd.Env = []string{nodePath, initEnv + "=" + specPath}
	cmd.Stderr = logf
	// Pdeathsig: a test binary killed without cleanups takes the node's processes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start init: %w", err)
	}
	n.init = cmd
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ok := false
		for sc.Scan() {
			if !ok && sc.Text() == initReady {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	n.initErr = make(chan error, 1)
	go func() { n.initErr <- cmd.Wait() }()
	select {
	case ok := <-ready:
		if !ok {
			return fmt.Errorf("init failed: %s", vlab.TailFile(logf.Name(), 10))
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("init not ready: %w", ctx.Err())
	case <-time.After(stepTimeout):
		return fmt.Errorf("init not ready after %s: %s", stepTimeout, vlab.TailFile(logf.Name(), 10))
	}
}

// bootOffset is the offset of a new node's boot clock: minus the host's uptime in whole seconds,
// so the node's starts at under a second.
func bootOffset() (string, error) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "", fmt.Errorf("/proc/uptime: %q", b)
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", fmt.Errorf("/proc/uptime: %w", err)
	}
	return strconv.Itoa(-int(up)), nil
}

// Netns is the name of the node's network namespace (/run/netns/NAME), for linking it to other
// namespaces (a second interface) or opening sockets in it (vlab.InNetns).
func (n *Node) Netns() string { return netnsName(n.Name) }

// Command returns a command that runs inside the node's namespaces (as root, in /, with a
// clean environment). The caller may set Stdin, Stdout and Stderr.
func (n *Node) Command(ctx context.Context, args ...string) *exec.Cmd {
	ns := []string{"nsenter", "--target", strconv.Itoa(n.init.Process.Pid),
		"--net", "--mount", "--uts", "--ipc", "--pid", "--time", "--"}
	cmd := exec.CommandContext(ctx, ns[0], append(ns[1:], args...)...)
	cmd.Env = []string{nodePath, "HOME=/root", "LANG=C", "USER=root", "LOGNAME=root"}
	cmd.WaitDelay = stepTimeout
	return cmd
}

// Run runs a command inside the node and returns its combined output; a failure's error
// carries the output.
func (n *Node) Run(ctx context.Context, args ...string) ([]byte, error) {
	out, err := n.Command(ctx, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %s: %w: %s", n.Name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// Path returns the host path at which the node's own view of path can be read.
func (n *Node) Path(path string) string {
	return filepath.Join(fmt.Sprintf("/proc/%d/root", n.init.Process.Pid), path)
}

// LogPath returns the log of a unit the node runs ("chronyd", "munge", "slurmctld", "slurmd").
func (n *Node) LogPath(unit string) string {
	return filepath.Join(n.Dir, unit+".log")
}

// close kills every process of the node (killing its init ends its PID namespace) and deletes
// its network namespace, which takes the link to the hub with it.
func (n *Node) close() error {
	var errs []error
	if n.init != nil && n.init.Process != nil {
		_ = n.init.Process.Kill()
		select {
		case <-n.initErr:
		case <-time.After(stepTimeout):
			errs = append(errs, fmt.Errorf("vcluster: init of %s did not exit", n.Name))
		}
	}
	for _, d := range n.daemons {
		select {
		case <-d.done:
		case <-time.After(stepTimeout):
			_ = d.cmd.Process.Kill()
			errs = append(errs, fmt.Errorf("vcluster: %s on %s did not exit", d.unit, n.Name))
		}
	}
	if n.netns {
		if err := run(context.Background(), "ip", "netns", "delete", netnsName(n.Name)); err != nil {
			errs = append(errs, err)
		}
		n.netns = false
	}
	return errors.Join(errs...)
}

// daemon is one unit's main process, started in the foreground through nsenter.
type daemon struct {
	unit, logPath string
	cmd           *exec.Cmd
	done          chan struct{}
	err           error
}

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}
