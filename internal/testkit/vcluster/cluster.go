package vcluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// ErrExists is returned by Add when a network namespace of the node's name already exists:
// the harness never adopts or clobbers a namespace it did not create.
var ErrExists = errors.New("network namespace already exists")

// stepTimeout bounds each teardown step and each short setup command.
const stepTimeout = 10 * time.Second

// Config says where a cluster lives.
type Config struct {
	// Dir holds one directory per node: its overlay layers, its init spec and the daemons'
	// logs. It must not lie under /etc or /var (those are overlaid on every node).
	Dir string
	// Bridge is the address of the bridge joining the nodes, in a hub namespace of its own;
	// node addresses are in its subnet.
	Bridge netip.Prefix
	// Accounts are the image's fixed-id users (munge, slurm), as its layers create them.
	Accounts []Account
}

// Cluster is a bridge in a hub namespace and the nodes attached to it.
type Cluster struct {
	cfg Config
	hub *vlab.Lab

	mu       sync.Mutex
	nodes    []*Node
	nextVeth int // veths are never reused: a node removed and added again gets a new one
	closed   bool
}

// Hub is the namespace holding the bridge (at Config.Bridge's address): where a test runs
// what the nodes reach there, such as bootd.
func (c *Cluster) Hub() *vlab.Lab { return c.hub }

// New creates the hub namespace with its bridge. Close removes it with every node.
func New(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("vcluster: no directory")
	}
	hub, err := vlab.New(ctx, fmt.Sprintf("vcluster-%d", os.Getpid()), cfg.Bridge)
	if err != nil {
		return nil, fmt.Errorf("vcluster: %w", err)
	}
	return &Cluster{cfg: cfg, hub: hub}, nil
}

// Node returns the node of that name, or nil.
func (c *Cluster) Node(name string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

var nodeName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,30}$`)

// netnsName is the network namespace of node name: named after the node and this process, so
// that clusters of tests running at once never meet.
func netnsName(name string) string { return fmt.Sprintf("%s-%d", name, os.Getpid()) }

// Add creates the node's namespaces, lays out its files, and starts the units its role
// enables (chronyd on "master" and "compute", munge on every node; slurmctld on "master",
// slurmd on "compute"). A node whose fstab mounts another node's exports must be added after
// it. Add returns once chronyd's and munged's sockets are up and, on a master, slurmctld
// answers a ping; a slurmd registers later (see WaitIdle), a chronyd synchronises later (see
// WaitTime). On failure the node is removed again.
func (c *Cluster) Add(ctx context.Context, nf NodeFiles) (*Node, error) {
	if !nodeName.MatchString(nf.Name) {
		return nil, fmt.Errorf("vcluster: node name %q: want a short lower-case host name", nf.Name)
	}
	if !nf.Addr.IsValid() || !c.cfg.Bridge.Contains(nf.Addr.Addr()) {
		return nil, fmt.Errorf("vcluster: node %s: address %v outside %v", nf.Name, nf.Addr, c.cfg.Bridge)
	}
	if _, err := os.Lstat("/run/netns/" + netnsName(nf.Name)); err == nil {
		return nil, fmt.Errorf("vcluster: node %s: %w (remove it with `ip netns delete %s` if it is a leftover)", nf.Name, ErrExists, netnsName(nf.Name))
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("vcluster: cluster is closed")
	}
	n := &Node{Name: nf.Name, Role: nf.Role, Addr: nf.Addr, MAC: nf.MAC, cluster: c, journal: nf.Journal, veth: fmt.Sprintf("vc%d", c.nextVeth)}
	c.nextVeth++
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	if err := n.start(ctx, nf.Files, nf.Devices); err != nil {
		return nil, errors.Join(fmt.Errorf("vcluster: node %s: %w", nf.Name, err), c.remove(n))
	}
	return n, nil
}

// Remove stops the node as a power cut would: every process it runs is killed and its network
// namespace, with its link to the bridge, deleted. Add may start it again, from fresh layers, as
// a netbooted node boots from its image and files again.
func (c *Cluster) Remove(n *Node) error { return c.remove(n) }

func (c *Cluster) remove(n *Node) error {
	c.mu.Lock()
	for i, m := range c.nodes {
		if m == n {
			c.nodes = append(c.nodes[:i], c.nodes[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	return n.close()
}

// Close kills every node's processes, deletes the nodes' namespaces and the hub. It is
// idempotent.
func (c *Cluster) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	nodes := c.nodes
	c.nodes = nil
	c.mu.Unlock()
	var errs []error
	for _, n := range nodes {
		errs = append(errs, n.close())
	}
	errs = append(errs, c.hub.Close())
	return errors.Join(errs...)
}

// WaitIdle polls sinfo on the controller node until every named node is idle, bounded by ctx
// and by tries polls one second apart. It fails early when a daemon of the cluster exits.
func (c *Cluster) WaitIdle(ctx context.Context, controller *Node, tries int, names ...string) error {
	var last string
	for i := 0; i < tries; i++ {
		if err := c.checkDaemons(); err != nil {
			return err
		}
		out, err := controller.Run(ctx, "sinfo", "--noheader", "--Node", "--format=%N %t")
		last = strings.TrimSpace(string(out))
		if err == nil && allIdle(last, names) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("vcluster: nodes %v not idle: %w; sinfo: %s", names, ctx.Err(), last)
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("vcluster: nodes %v not idle after %d polls; sinfo: %s", names, tries, last)
}

func allIdle(sinfo string, names []string) bool {
	state := map[string]string{}
	for _, line := range strings.Split(sinfo, "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			state[f[0]] = f[1]
		}
	}
	for _, n := range names {
		if state[n] != "idle" {
			return false
		}
	}
	return true
}

// checkDaemons returns an error naming the first daemon that has exited.
func (c *Cluster) checkDaemons() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		for _, d := range n.daemons {
			if d.exited() {
				return fmt.Errorf("vcluster: %s on %s exited: %v\n%s", d.unit, n.Name, d.err, vlab.TailFile(d.logPath, 15))
			}
		}
	}
	return nil
}

// run runs a host command, folding its output into the error.
func run(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
