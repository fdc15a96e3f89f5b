package bootd

import (
	"fmt"
	"net/netip"

	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/overlay"
	"github.com/labcluster/gpucluster/internal/secrets"
)

// Overlay renders the asking node's files, secrets included, once identify accepts it.
func (n nodes) Overlay(from netip.AddrPort) (string, []httpd.OverlayFile, error) {
	node, err := n.d.identify(from)
	if err != nil {
		return "", nil, err
	}
	c, err := n.d.cluster()
	if err != nil {
		return "", nil, err
	}
	files, err := overlay.Render(n.d.templates, c, node.Name)
	if err != nil {
		return "", nil, fmt.Errorf("render %s's overlay: %w", node.Name, err)
	}
	out := make([]httpd.OverlayFile, len(files))
	for i, f := range files {
		out[i] = httpd.OverlayFile{Path: f.Path, Mode: f.Mode, UID: f.UID, GID: f.GID, Data: f.Data}
	}
	return node.Name, out, nil
}

// cluster is everything the overlay templates see: the assigned nodes, the network, the Slurm
// settings and the secrets (Render hands each node only its own).
func (d *daemon) cluster() (overlay.Cluster, error) {
	nodes, _ := d.inv.Snapshot()
	s, err := d.overlaySecrets(nodes)
	if err != nil {
		return overlay.Cluster{}, err
	}
	c := overlay.Cluster{
		Name: d.cfg.Slurm.ClusterName, Domain: d.cfg.Network.Domain, Subnet: d.cfg.Network.Subnet,
		Gateway: d.cfg.Network.Gateway, DNS: d.cfg.Network.DNS, BootdURL: d.baseURL(), Secrets: s,
		Slurm: overlay.SlurmOptions{ProctrackType: d.cfg.Slurm.ProctrackType, TaskPlugin: d.cfg.Slurm.TaskPlugin, MaxNodeCount: d.cfg.Compute.MaxNodes},
	}
	for _, n := range nodes {
		c.Nodes = append(c.Nodes, overlay.Node{Name: n.Name, Role: n.Role, Address: n.Address, MAC: n.MAC, Hardware: overlayHardware(n.Hardware)})
	}
	return c, nil
}

func (d *daemon) overlaySecrets(nodes []inventory.Node) (overlay.Secrets, error) {
	cs, err := d.secrets.Cluster()
	if err != nil {
		return overlay.Secrets{}, err
	}
	s := overlay.Secrets{MungeKey: cs.MungeKey, RootPublicKey: cs.Root.Public, RootPrivateKey: cs.Root.Private, HostKeys: map[string]overlay.HostKeys{}}
	for _, n := range nodes {
		keys, err := d.secrets.HostKeys(n.Name)
		if err != nil {
			return overlay.Secrets{}, err
		}
		s.HostKeys[n.Name] = hostKeys(keys)
	}
	return s, nil
}

func hostKeys(keys secrets.HostKeys) overlay.HostKeys {
	out := make(overlay.HostKeys, len(keys))
	for i, k := range keys {
		out[i] = overlay.HostKey{Type: string(k.Type), Private: k.Private, Public: k.Public}
	}
	return out
}

func overlayHardware(hw *inventory.Hardware) *overlay.Hardware {
	if hw == nil {
		return nil
	}
	o := &overlay.Hardware{CPUs: hw.CPUs, Boards: hw.Boards, Sockets: hw.Sockets, CoresPerSocket: hw.CoresPerSocket,
		ThreadsPerCore: hw.ThreadsPerCore, RealMemoryMiB: hw.RealMemoryMiB}
	for _, g := range hw.GPUs {
		o.GPUs = append(o.GPUs, overlay.GPU{Type: g.Type, File: g.File})
	}
	return o
}
