package bootd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/inventory"
)

// identify decides whether a request comes from a node, strongly enough to hand it secrets or
// change its record (see SECURITY.md for what each check stops):
//   - the source address is the node's static address,
//   - the source port is privileged, so only root on that machine could have sent it,
//   - the neighbour table holds the node's MAC for that address, so a host that merely took the
//     address (with another MAC) is refused.
func (d *daemon) identify(from netip.AddrPort) (inventory.Node, error) {
	n, err := d.inv.NodeByAddress(from.Addr())
	if err != nil {
		return inventory.Node{}, fmt.Errorf("no node has address %s: %w", from.Addr(), httpd.ErrForbidden)
	}
	if from.Port() >= 1024 {
		return inventory.Node{}, fmt.Errorf("request for %s's files from unprivileged port %d: %w", n.Name, from.Port(), httpd.ErrForbidden)
	}
	mac, err := d.neighbourMAC(from.Addr())
	if err != nil || mac != n.MAC {
		return inventory.Node{}, fmt.Errorf("request for %s's files from %s, whose MAC is %q, not %s: %w", n.Name, from.Addr(), mac, n.MAC, httpd.ErrForbidden)
	}
	return n, nil
}

// nodes serves booted nodes: their overlay, their hello, their hardware report, the master's
// power requests.
type nodes struct{ d *daemon }

func (n nodes) Power(ctx context.Context, from netip.AddrPort, token string, request []byte) (string, []byte, error) {
	return n.d.nodePower(ctx, from, token, request)
}

// Hello records that the node asking is up: identified as for its overlay, and, for a node with a
// TPM, showing the token of its sealed overlay.
func (n nodes) Hello(from netip.AddrPort, token string) (httpd.Target, error) {
	n.d.identity.RLock()
	defer n.d.identity.RUnlock()
	node, err := n.d.identifyReport(from, token)
	if err != nil {
		return httpd.Target{}, err
	}
	if node, err = n.d.inv.SetState(node.Name, inventory.StateUp); err != nil {
		return httpd.Target{}, err
	}
	n.d.stages.set(node.Name, "reported up")
	return n.d.target(node)
}

// identifyReport is identify, and the node's token for a node with a TPM.
func (d *daemon) identifyReport(from netip.AddrPort, token string) (inventory.Node, error) {
	node, err := d.identify(from)
	if err != nil {
		return node, err
	}
	return node, d.checkToken(node, token)
}

// ReportHardware records a node's report (identified and with its token, as for Hello) and says
// whether it changed what bootd held: a node's first report (its first boot fetched its overlay
// before it could report) or new hardware (another GPU) changes its gres.conf and slurmd options,
// which the node then fetches again.
func (n nodes) ReportHardware(from netip.AddrPort, token string, report []byte) (string, bool, error) {
	n.d.identity.RLock()
	defer n.d.identity.RUnlock()
	node, err := n.d.identifyReport(from, token)
	if err != nil {
		return "", false, err
	}
	hw, err := HardwareFromReport(report)
	if err != nil {
		return "", false, fmt.Errorf("hardware report of %s: %w: %w", node.Name, err, httpd.ErrInvalid)
	}
	changed := node.Hardware == nil || !sameHardware(*node.Hardware, hw)
	if _, err = n.d.inv.SetHardware(node.Name, hw); err == nil {
		n.d.stages.set(node.Name, "reported its hardware")
	}
	return node.Name, changed, err
}

// sameHardware compares two reports as the rendered files see them (no GPUs is no GPUs, whether
// the stored list is empty or absent).
func sameHardware(a, b inventory.Hardware) bool {
	return a.CPUs == b.CPUs && a.Boards == b.Boards && a.Sockets == b.Sockets && a.CoresPerSocket == b.CoresPerSocket &&
		a.ThreadsPerCore == b.ThreadsPerCore && a.RealMemoryMiB == b.RealMemoryMiB && slices.Equal(a.GPUs, b.GPUs)
}

// hardwareReport is what a node posts: the first line of `slurmd -C` and its GPUs' names as
// `nvidia-smi --query-gpu=name --format=csv,noheader` prints them, in index order.
type hardwareReport struct {
	SlurmdC string   `json:"slurmd_c"`
	GPUs    []string `json:"gpus"`
}

// HardwareFromReport is what bootd records from a node's hardware report (the JSON bootd-node
// report posts). Exported so the end-to-end cluster test records a report as bootd does.
func HardwareFromReport(report []byte) (inventory.Hardware, error) {
	var r hardwareReport
	dec := json.NewDecoder(bytes.NewReader(report))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return inventory.Hardware{}, err
	}
	hw, err := parseSlurmdC(r.SlurmdC)
	if err != nil {
		return hw, err
	}
	for i, name := range r.GPUs {
		hw.GPUs = append(hw.GPUs, inventory.GPU{Type: gpuType(name), File: fmt.Sprintf("/dev/nvidia%d", i)})
	}
	return hw, nil
}

// parseSlurmdC reads "NodeName=c1 CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=4
// ThreadsPerCore=2 RealMemory=15866".
func parseSlurmdC(line string) (inventory.Hardware, error) {
	var hw inventory.Hardware
	fields := map[string]*int{"CPUs": &hw.CPUs, "Boards": &hw.Boards, "SocketsPerBoard": &hw.Sockets,
		"CoresPerSocket": &hw.CoresPerSocket, "ThreadsPerCore": &hw.ThreadsPerCore, "RealMemory": &hw.RealMemoryMiB}
	for _, kv := range strings.Fields(line) {
		k, v, _ := strings.Cut(kv, "=")
		if p, ok := fields[k]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return hw, fmt.Errorf("slurmd -C %s=%q is not a count", k, v)
			}
			*p = n
		}
	}
	if hw.CPUs == 0 || hw.RealMemoryMiB == 0 {
		return hw, errors.New("slurmd -C line lacks CPUs or RealMemory")
	}
	return hw, nil
}

// gpuType turns "NVIDIA GeForce RTX 3090" into "rtx3090", a gres type name.
func gpuType(name string) string {
	var b strings.Builder
	for _, w := range strings.Fields(strings.ToLower(name)) {
		if w == "nvidia" || w == "geforce" {
			continue
		}
		for _, r := range w {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
				b.WriteRune(r)
			}
		}
	}
	if b.Len() == 0 {
		return "gpu"
	}
	return b.String()
}
