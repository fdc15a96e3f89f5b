package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// lab is the virtual segment: bootd (and nginx, for its baseline) in the lab's namespace on the
// bridge, one namespace per node, every link shaped to the same rate.
type lab struct {
	o     options
	lab   *vlab.Lab
	bootd *vlab.Bootd
	nodes []*node
	nginx *vlab.Process
}

type node struct {
	name string
	mac  net.HardwareAddr
	addr netip.Addr
	host *vlab.Host
}

const peerPort = "7480"

func newLab(ctx context.Context, o options, n int) (*lab, error) {
	vl, err := vlab.New(ctx, fmt.Sprintf("rstorm-%d", os.Getpid()), netip.MustParsePrefix("10.80.0.1/24"))
	if err != nil {
		return nil, err
	}
	l := &lab{o: o, lab: vl}
	ok := false
	defer func() {
		if !ok {
			l.close()
		}
	}()
	if err := l.assign(n); err != nil {
		return nil, err
	}
	if err := l.startBootd(ctx); err != nil {
		return nil, err
	}
	progress("lab: %d nodes, every link shaped to %d Mbit/s", n, o.rateMbit)
	for i := range n {
		nd := &node{name: fmt.Sprintf("c%d", i+1), mac: nodeMAC(i), addr: nodeAddr(i)}
		if nd.host, err = vl.AddHost(ctx, nd.name, nd.mac); err != nil {
			return nil, err
		}
		if out, err := nd.host.Run(ctx, "ip", "addr", "add", nd.addr.String()+"/24", "dev", "eth0"); err != nil {
			return nil, fmt.Errorf("%s: address: %v: %s", nd.name, err, out)
		}
		if err := l.shape(ctx, nd); err != nil {
			return nil, err
		}
		l.nodes = append(l.nodes, nd)
	}
	if err := l.tc(ctx, l.lab.Command, vl.Bridge); err != nil {
		return nil, err
	}
	if err := l.staticNeighbours(ctx); err != nil {
		return nil, err
	}
	ok = true
	return l, nil
}

// assign names the nodes in bootd's inventory before bootd starts, as `bootd assign` would once
// each had netbooted to the discovery screen: the storm starts where the nodes' initramfs does.
func (l *lab) assign(n int) error {
	dir := filepath.Join(l.o.work, "bootd", "state")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	inv, err := inventory.Open(filepath.Join(dir, "inventory.json"))
	if err != nil {
		return err
	}
	for i := range n {
		mac := nodeMAC(i)
		if _, _, err := inv.See(mac.String(), inventory.Facts{Product: "rootstorm node"}); err != nil {
			return err
		}
		if _, err := inv.Assign(inventory.AssignRequest{Name: fmt.Sprintf("c%d", i+1), Role: "compute", Address: nodeAddr(i), MAC: mac.String()}); err != nil {
			return err
		}
	}
	return inv.Compact()
}

func nodeMAC(i int) net.HardwareAddr {
	return net.HardwareAddr{0x52, 0x54, 0x00, 0x57, 0x00, byte(i + 1)}
}
func nodeAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 80, 0, byte(101 + i)}) }

func (l *lab) startBootd(ctx context.Context) error {
	dir := filepath.Join(l.o.work, "bootd")
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o700); err != nil {
		return err
	}
	// The images directory is the one buildImages published into.
	images := filepath.Join(l.o.work, "images")
	if err := os.Symlink(images, filepath.Join(dir, "images")); err != nil && !os.IsExist(err) {
		return err
	}
	b, err := l.lab.StartBootd(ctx, l.o.bootd, dir)
	if err != nil {
		return err
	}
	l.bootd = b
	return nil
}

// restartBootd gives a storm a fresh bootd: no peers announced by the storm before.
func (l *lab) restartBootd(ctx context.Context) error {
	l.bootd.Proc.Kill()
	return l.startBootd(ctx)
}

// shape puts a token bucket on both directions of the node's link: the lab's end (what the
// node receives) and the node's (what it sends).
func (l *lab) shape(ctx context.Context, nd *node) error {
	if err := l.tc(ctx, l.lab.Command, nd.host.Peer); err != nil {
		return err
	}
	return l.tc(ctx, nd.host.Command, "eth0")
}

// tc shapes dev to the rate with a token bucket whose queue holds a second of traffic: with
// 100 ms, a link full of chunk data dropped the SYNs of new connections three times in a row and
// nodes could not reach their peers at all (this kernel has no fair-queueing discipline, fq_codel
// or sfq, to put under it; a switch port drops too, but the nodes' TCP sees fewer flows there).
func (l *lab) tc(ctx context.Context, in func(context.Context, string, ...string) *exec.Cmd, dev string) error {
	cmd := in(ctx, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", fmt.Sprintf("%dmbit", l.o.rateMbit),
		"burst", "128kb", "latency", "1s")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("tc on %s: %v: %s", dev, err, out)
	}
	return nil
}

// staticNeighbours fills every node's neighbour table (and the lab's) with the others' MACs: a
// tbf-shaped veth drops a node's ARP replies behind its own full upload queue, and nodes could
// not resolve some peers at all; a PC's NIC queues its own uplink without dropping them.
func (l *lab) staticNeighbours(ctx context.Context) error {
	var lines []string
	for _, nd := range l.nodes {
		lines = append(lines, fmt.Sprintf("neigh replace %s lladdr %s nud permanent dev eth0", nd.addr, nd.mac))
	}
	brMAC, err := l.lab.Command(ctx, "cat", "/sys/class/net/"+l.lab.Bridge+"/address").Output()
	if err != nil {
		return err
	}
	server := fmt.Sprintf("neigh replace %s lladdr %s nud permanent dev eth0", l.lab.Addr.Addr(), strings.TrimSpace(string(brMAC)))
	for i, nd := range l.nodes {
		others := append(append([]string{server}, lines[:i]...), lines[i+1:]...)
		cmd := nd.host.Command(ctx, "ip", "-batch", "-")
		cmd.Stdin = strings.NewReader(strings.Join(others, "\n") + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: neighbours: %v: %s", nd.name, err, out)
		}
	}
	var br []string
	for _, nd := range l.nodes {
		br = append(br, fmt.Sprintf("neigh replace %s lladdr %s nud permanent dev %s", nd.addr, nd.mac, l.lab.Bridge))
	}
	cmd := l.lab.Command(ctx, "ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(br, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("lab: neighbours: %v: %s", err, out)
	}
	return nil
}

// applianceBytes is what bootd's link (the bridge's own queue: what the lab's namespace sends
// to the segment) has sent so far.
func (l *lab) applianceBytes(ctx context.Context) (int64, error) {
	out, err := l.lab.Command(ctx, "tc", "-s", "-j", "qdisc", "show", "dev", l.lab.Bridge).Output()
	if err != nil {
		return 0, fmt.Errorf("tc -s qdisc show dev %s: %w", l.lab.Bridge, err)
	}
	var qs []struct {
		Kind  string `json:"kind"`
		Bytes int64  `json:"bytes"`
	}
	if err := json.Unmarshal(out, &qs); err != nil {
		return 0, err
	}
	for _, q := range qs {
		if q.Kind == "tbf" {
			return q.Bytes, nil
		}
	}
	return 0, fmt.Errorf("no tbf on %s", l.lab.Bridge)
}

// cmdline is the kernel command line bootd gives the node now: its boot script's kernel line,
// asked for from the node's own address as iPXE would.
func (l *lab) cmdline(ctx context.Context, nd *node) (string, error) {
	url := fmt.Sprintf("http://%s/ipxe/machine?mac=%s", l.lab.Addr.Addr(), strings.ReplaceAll(nd.mac.String(), ":", "-"))
	out, err := nd.host.Run(ctx, "curl", "-fsS", "--max-time", "120", url)
	if err != nil {
		return "", fmt.Errorf("%s: boot script: %v: %s", nd.name, err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "kernel "); ok {
			f := strings.Fields(strings.Split(rest, "||")[0])
			if len(f) > 1 {
				return strings.Join(f[1:], " "), nil
			}
		}
	}
	return "", fmt.Errorf("%s: no kernel line in its boot script:\n%s", nd.name, out)
}

func (l *lab) killNodes(ctx context.Context) {
	for _, nd := range l.nodes {
		_ = nd.host.KillAll(ctx)
	}
}

func (l *lab) close() {
	if l.lab != nil {
		_ = l.lab.Close()
	}
}
