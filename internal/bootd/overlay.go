package bootd

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/nodetpm"
	"github.com/labcluster/gpucluster/internal/overlay"
	"github.com/labcluster/gpucluster/internal/secrets"
)

// Overlay renders the asking node's files, secrets included, once identify accepts it. A node
// with a TPM on record gets them sealed to that TPM, and must present it (keys): the first key a
// node presents after its assign is recorded. A node without one gets them plain (the weaker
// check: SECURITY.md).
func (n nodes) Overlay(from netip.AddrPort, keys *httpd.TPMKeys) (httpd.Overlay, error) {
	n.d.identity.RLock()
	defer n.d.identity.RUnlock()
	node, err := n.d.identify(from)
	if err != nil {
		return httpd.Overlay{}, err
	}
	var presented *nodetpm.Presented
	if keys != nil {
		p, err := nodetpm.Evidence{EK: keys.EK, AK: keys.AK}.Check()
		if err != nil {
			return httpd.Overlay{}, fmt.Errorf("%s's TPM keys: %w: %w", node.Name, err, httpd.ErrInvalid)
		}
		presented = &p
		if node, err = n.d.recordTPM(node, p.EK); err != nil {
			return httpd.Overlay{}, err
		}
	} else if node.TPM != nil {
		return httpd.Overlay{}, fmt.Errorf("%s has a TPM on record (endorsement key %s): a request that does not present it gets nothing: %w", node.Name, node.TPM.EKSHA256, httpd.ErrForbidden)
	}
	all, _ := n.d.inv.Snapshot()
	start := time.Now()
	files, err := n.d.renderer().Render(all, node.Name)
	n.d.metrics.OverlayRendered(err, time.Since(start))
	if err != nil {
		return httpd.Overlay{}, err
	}
	n.d.stages.set(node.Name, "fetched its overlay")
	out := make([]httpd.OverlayFile, len(files), len(files)+1)
	for i, f := range files {
		out[i] = httpd.OverlayFile{Path: f.Path, Mode: f.Mode, UID: f.UID, GID: f.GID, Data: f.Data}
	}
	if presented == nil {
		return httpd.Overlay{Node: node.Name, Files: out}, nil
	}
	token, err := n.d.nodeToken(node)
	if err != nil {
		return httpd.Overlay{}, err
	}
	out = append(out, httpd.OverlayFile{Path: NodeTokenPath, Mode: 0o600, Data: []byte(token + "\n")})
	sealed, err := seal(node, *presented, out)
	if err != nil {
		return httpd.Overlay{}, fmt.Errorf("seal %s's overlay: %w", node.Name, err)
	}
	return httpd.Overlay{Node: node.Name, Files: out, Sealed: sealed}, nil
}

// seal encrypts files (as their tar.gz) so that only the TPM on node's record opens them, through
// the AK the request presented.
func seal(node inventory.Node, p nodetpm.Presented, files []httpd.OverlayFile) (*httpd.Sealed, error) {
	var tgz bytes.Buffer
	if err := httpd.WriteTarGz(&tgz, files); err != nil {
		return nil, err
	}
	ek := nodetpm.EK{DER: node.TPM.EK}
	cred, secret, err := nodetpm.Seal(rand.Reader, ek, p)
	if err != nil {
		return nil, err
	}
	payload, err := nodetpm.Encrypt(rand.Reader, secret, tgz.Bytes())
	if err != nil {
		return nil, err
	}
	return &httpd.Sealed{Credential: cred, Payload: payload, EK: node.TPM.EKSHA256}, nil
}

// recordTPM checks the endorsement key a request from node presents against the one on record,
// or records it when there is none yet (the first after the node's assign).
func (d *daemon) recordTPM(node inventory.Node, ek nodetpm.EK) (inventory.Node, error) {
	had := node.TPM != nil
	n, err := d.inv.RecordTPM(node.Name, node.AssignedAt, inventory.NewTPM(ek.DER, false, time.Now()))
	var mismatch *inventory.TPMMismatch
	switch {
	case errors.As(err, &mismatch):
		return n, fmt.Errorf("%w; the request presented %s: a machine that copies %s's MAC and address, or %s's TPM changed (then give its key: bootd assign %s --ek FILE): %w",
			err, ek.Fingerprint(), node.Name, node.Name, node.Name, httpd.ErrForbidden)
	case errors.Is(err, inventory.ErrNotFound):
		return n, fmt.Errorf("%w: %w", err, httpd.ErrForbidden)
	case err != nil:
		return n, err
	}
	if !had {
		d.log.WithFields(logrus.Fields{"node": n.Name, "tpm_ek_sha256": n.TPM.EKSHA256}).Info("recorded the node's TPM endorsement key (its first after its assign): its secrets are sealed to that TPM from now on")
	}
	return n, nil
}

// NodeTokenPath is where a node with a TPM finds its node token: in its sealed overlay, root's
// only, shown by bootd-node when it reports (hello, hardware).
const NodeTokenPath = "/etc/bootd/node.token"

// nodeToken is node n's token: an HMAC, under the store's node-token key, of its name, its holder
// (MAC, assignment time) and its TPM's endorsement key. Only the machine whose TPM opened n's
// overlay has it; it changes when the name moves or the key on record does.
func (d *daemon) nodeToken(n inventory.Node) (string, error) {
	key, err := d.secrets.NodeTokenKey()
	if err != nil {
		return "", err
	}
	ek := ""
	if n.TPM != nil {
		ek = n.TPM.EKSHA256
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("bootd node token v1\x00" + n.Name + "\x00" + holder(n) + "\x00" + ek))
	return hex.EncodeToString(m.Sum(nil)), nil
}

// checkToken accepts a report (hello, hardware) from node n: any that identify accepted, for a
// node without a TPM; one showing n's token, for a node with one.
func (d *daemon) checkToken(n inventory.Node, token string) error {
	if n.TPM == nil {
		return nil
	}
	want, err := d.nodeToken(n)
	if err != nil {
		return err
	}
	if !hmac.Equal([]byte(token), []byte(want)) {
		return fmt.Errorf("%s has a TPM on record: its reports must show the token of its sealed overlay (%s), this one shows none or another: %w", n.Name, NodeTokenPath, httpd.ErrForbidden)
	}
	return nil
}

func (d *daemon) renderer() Renderer {
	return Renderer{Config: d.cfg, Secrets: d.secrets, Templates: d.templates, BaseURL: d.baseURL()}
}

// Renderer renders node overlays exactly as the running daemon does, from the configuration,
// the assigned nodes and the secrets store; tests that need a node's real files use it too.
type Renderer struct {
	Config    config.Config
	Secrets   *secrets.Store
	Templates fs.FS
	BaseURL   string
}

// Render returns the files of node name, given every assigned node.
func (r Renderer) Render(nodes []inventory.Node, name string) ([]overlay.File, error) {
	c, err := r.cluster(r.withMaster(nodes))
	if err != nil {
		return nil, err
	}
	files, err := overlay.Render(r.Templates, c, name)
	if err != nil {
		return nil, fmt.Errorf("render %s's overlay: %w", name, err)
	}
	return files, nil
}

// cluster is everything the overlay templates see: the assigned nodes, the network, the Slurm
// settings and the secrets (Render hands each node only its own).
func (r Renderer) cluster(nodes []inventory.Node) (overlay.Cluster, error) {
	s, err := r.overlaySecrets(nodes)
	if err != nil {
		return overlay.Cluster{}, err
	}
	cfg := r.Config
	c := overlay.Cluster{
		Name: cfg.Slurm.ClusterName, Domain: cfg.Network.Domain, Subnet: cfg.Network.Subnet,
		Gateway: cfg.Network.Gateway, DNS: cfg.Network.DNS, BootdURL: r.BaseURL, Secrets: s,
		NTPServers: cfg.Master.NTPServers,
		Slurm: overlay.SlurmOptions{ProctrackType: cfg.Slurm.ProctrackType, TaskPlugin: cfg.Slurm.TaskPlugin, MaxNodeCount: cfg.Compute.MaxNodes,
			SuspendTime: cfg.Slurm.SuspendTime, SuspendTimeout: cfg.Slurm.SuspendTimeout, ResumeTimeout: cfg.Slurm.ResumeTimeout},
	}
	for _, u := range cfg.Users {
		c.Users = append(c.Users, overlay.User(u)) // the same fields: a new one in config fails to build here
	}
	for _, n := range nodes {
		c.Nodes = append(c.Nodes, overlay.Node{Name: n.Name, Role: n.Role, Address: n.Address, MAC: n.MAC, Hardware: overlayHardware(n.Hardware)})
	}
	c.Planned = r.plan()
	return c, nil
}

// plan is every node the configuration can place: the master and c1..c<max_nodes>.
func (r Renderer) plan() []overlay.Node {
	cfg := r.Config
	names := []string{cfg.Master.Name}
	for i := 1; i <= cfg.Compute.MaxNodes; i++ {
		names = append(names, cfg.ComputeName(i))
	}
	var plan []overlay.Node
	for _, name := range names {
		if p, err := cfg.Place(name); err == nil {
			plan = append(plan, overlay.Node{Name: p.Name, Role: p.Role, Address: p.Address})
		}
	}
	return plan
}

// withMaster adds the master as the configuration places it when no machine is assigned to it
// yet: computes may boot first, and their Slurm, chrony and NFS settings point at the master's
// name and address, which do not depend on its hardware.
func (r Renderer) withMaster(nodes []inventory.Node) []inventory.Node {
	for _, n := range nodes {
		if n.Role == overlay.RoleMaster {
			return nodes
		}
	}
	m := inventory.Node{Name: r.Config.Master.Name, Role: overlay.RoleMaster, Address: r.Config.Master.Address}
	return append([]inventory.Node{m}, nodes...)
}

func (r Renderer) overlaySecrets(nodes []inventory.Node) (overlay.Secrets, error) {
	cs, err := r.Secrets.Cluster()
	if err != nil {
		return overlay.Secrets{}, err
	}
	s := overlay.Secrets{MungeKey: cs.MungeKey, RootPublicKey: cs.Root.Public, RootPrivateKey: cs.Root.Private,
		HostKeys: map[string]overlay.HostKeys{}, HostCAPublic: cs.HostCA.Public}
	for _, n := range nodes {
		keys, err := r.Secrets.HostKeys(n.Name, holder(n), r.principals(n)...)
		if err != nil {
			return overlay.Secrets{}, err
		}
		s.HostKeys[n.Name] = hostKeys(keys)
	}
	// After HostKeys: a name that changed holders had its old keys revoked just now.
	s.RevokedHostKeys = r.Secrets.RevokedHostKeys()
	return s, nil
}

// holder names the machine that holds node n's name, and since when, for its host keys: an
// assignment of the name to another machine, or to the same one again after an unassign, gets
// fresh keys (secrets.Store.HostKeys). "" for the master that withMaster stands in for.
func holder(n inventory.Node) string {
	if n.MAC == "" {
		return ""
	}
	return n.MAC + " assigned " + n.AssignedAt.UTC().Format(time.RFC3339Nano)
}

// holders are the holders of every assigned node's name.
func holders(inv *inventory.Store) map[string]string {
	nodes, _ := inv.Snapshot()
	h := make(map[string]string, len(nodes))
	for _, n := range nodes {
		h[n.Name] = holder(n)
	}
	return h
}

// principals are the names a node's host certificate is valid for: the ones SSH clients use.
func (r Renderer) principals(n inventory.Node) []string {
	p := []string{n.Name}
	if d := r.Config.Network.Domain; d != "" {
		p = append(p, n.Name+"."+d)
	}
	return append(p, n.Address.String())
}

func hostKeys(keys secrets.HostKeys) overlay.HostKeys {
	out := make(overlay.HostKeys, len(keys))
	for i, k := range keys {
		out[i] = overlay.HostKey{Type: string(k.Type), Private: k.Private, Public: k.Public, Cert: k.Cert}
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
