package bootd

import (
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/labview"
	"github.com/labcluster/gpucluster/internal/metrics"
	"github.com/labcluster/gpucluster/internal/power"
)

// stages remembers, per node name, the last step of its boot bootd saw and the image version it
// last fetched a boot script for. In memory only: after a restart the page shows them again from
// each node's next boot (the inventory's state is kept).
type stages struct {
	mu    sync.Mutex
	nodes map[string]stage
}

type stage struct {
	what           string
	at             time.Time
	image, version string
}

func newStages() *stages { return &stages{nodes: map[string]stage{}} }

func (s *stages) set(node, what string) {
	if s == nil { // a daemon made by a test without them
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.nodes[node]
	st.what, st.at = what, time.Now()
	s.nodes[node] = st
}

func (s *stages) booted(node, image, version string) {
	if s == nil { // a daemon made by a test without them
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[node] = stage{what: "fetched its boot script", at: time.Now(), image: image, version: version}
}

func (s *stages) forget(node string) {
	if s == nil { // a daemon made by a test without them
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, node)
}

func (s *stages) get(node string) stage {
	if s == nil {
		return stage{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes[node]
}

// progress follows image downloads for the boot stages (httpd.Progress).
type progress struct{ d *daemon }

func (p progress) Fetching(from netip.Addr, file string) { p.note(from, "fetching "+file) }

func (p progress) Fetched(from netip.Addr, file string, err error) {
	if err != nil {
		p.note(from, "download of "+file+" cut short")
		return
	}
	p.note(from, "fetched "+file)
}

func (p progress) note(from netip.Addr, what string) {
	if n, err := p.d.inv.NodeByAddress(from); err == nil {
		p.d.stages.set(n.Name, what)
	}
}

// roleImages keeps the version each role boots for the page and /metrics without making a
// scrape wait for a new version's hashing (gigabytes): it resolves at most once at a time per
// role, in the background, and answers with the last result meanwhile.
type roleImages struct {
	d    *daemon
	mu   sync.Mutex
	last map[string]labview.RoleImage // by role
	busy map[string]bool
}

// resolveWait is how long a view waits for a resolve before it shows the last result.
const resolveWait = 200 * time.Millisecond

func newRoleImages(d *daemon) *roleImages {
	return &roleImages{d: d, last: map[string]labview.RoleImage{}, busy: map[string]bool{}}
}

// get returns each role's image, master first.
func (r *roleImages) get() []labview.RoleImage {
	cfg := r.d.cfg
	roles := []struct{ role, image, version string }{
		{"master", cfg.Master.Image, cfg.Master.Version}, {"compute", cfg.Compute.Image, cfg.Compute.Version}}
	out := make([]labview.RoleImage, len(roles))
	for i, x := range roles {
		out[i] = r.one(x.role, x.image, x.version)
	}
	return out
}

func (r *roleImages) one(role, image, pinned string) labview.RoleImage {
	r.mu.Lock()
	if r.busy[role] {
		last := r.last[role]
		r.mu.Unlock()
		return last
	}
	r.busy[role] = true
	r.mu.Unlock()
	done := make(chan labview.RoleImage, 1)
	go func() {
		ri := labview.RoleImage{Role: role, Image: image, Pinned: pinned != ""}
		if img, err := r.d.images.Resolve(image, pinned); err != nil {
			ri.Problem = err.Error()
		} else {
			ri.Version = img.Manifest.Version
		}
		r.mu.Lock()
		r.last[role], r.busy[role] = ri, false
		r.mu.Unlock()
		done <- ri
	}()
	select {
	case ri := <-done:
		return ri
	case <-time.After(resolveWait):
		r.mu.Lock()
		defer r.mu.Unlock()
		last := r.last[role]
		if last.Image == "" {
			last = labview.RoleImage{Role: role, Image: image, Pinned: pinned != "", Problem: "verifying a new version"}
		}
		return last
	}
}

// labSource is the daemon as the page sees it.
type labSource struct{ d *daemon }

func (l labSource) Lab() labview.Lab {
	d := l.d
	nodes, waiting := d.inv.Snapshot()
	now := time.Now()
	lab := labview.Lab{Taken: now, Server: labview.Server{Interface: d.cfg.Interface, Address: d.server, Started: d.started},
		Images: d.roleImages.get()}
	var names []string
	powered := d.powered.snapshot()
	for _, n := range nodes {
		ln := l.node(n)
		ln.Power = powerState(powered[n.Name])
		lab.Nodes = append(lab.Nodes, ln)
		names = append(names, n.Name)
	}
	for i := range lab.Images {
		for _, n := range nodes {
			if n.Role == lab.Images[i].Role {
				lab.Images[i].Nodes++
			}
		}
	}
	leases := map[string]netip.Addr{}
	for _, le := range d.inv.Leases() {
		if !le.Declined && le.Expires.After(now) {
			leases[le.MAC] = le.Address
		}
	}
	next := labview.NextNames(names, d.cfg.Master.Name, d.cfg.Compute.Prefix, d.cfg.Compute.MaxNodes, len(waiting))
	for i, m := range waiting {
		lm := labview.Machine{MAC: m.MAC, Vendor: vendor(m.Facts), Serial: m.Facts.Serial, UUID: m.Facts.UUID,
			Firmware: firmware(m.Facts), Address: leases[m.MAC], FirstSeen: m.FirstSeen, LastSeen: m.LastSeen}
		lm.Stands = labview.Stands(lm, now)
		name := ""
		if i < len(next) {
			name = next[i]
		}
		lm.Command = labview.AssignCommand(name, m.MAC)
		lab.Waiting = append(lab.Waiting, lm)
	}
	return lab
}

func (l labSource) node(n inventory.Node) labview.Node {
	st := l.d.stages.get(n.Name)
	ln := labview.Node{Name: n.Name, Role: n.Role, MAC: n.MAC, Address: n.Address, State: string(n.State),
		Stage: st.what, StageAt: st.at, Image: st.image, Version: st.version,
		Vendor: vendor(n.Facts), Serial: n.Facts.Serial, LastSeen: n.LastSeen}
	if hw := n.Hardware; hw != nil {
		ln.Hardware = &labview.Hardware{CPUs: hw.CPUs, MemoryMiB: hw.RealMemoryMiB, GPUs: len(hw.GPUs)}
		if len(hw.GPUs) > 0 {
			ln.Hardware.GPUType = hw.GPUs[0].Type
		}
	}
	return ln
}

// powerState is what the page shows of a node's power: on or off as its BMC last said, "" when
// bootd knows nothing (no BMC asked, or a magic packet sent: that says nothing of the state).
func powerState(r power.Result) string {
	if r.State == power.StateOn || r.State == power.StateOff {
		return string(r.State)
	}
	return ""
}

func vendor(f inventory.Facts) string { return strings.TrimSpace(f.Manufacturer + " " + f.Product) }

func firmware(f inventory.Facts) string { return strings.Trim(f.Platform+"/"+f.Arch, "/") }

// census is the inventory as /metrics counts it.
func (d *daemon) census() metrics.Census {
	nodes, waiting := d.inv.Snapshot()
	c := metrics.Census{Waiting: len(waiting)}
	for _, n := range nodes {
		c.Nodes = append(c.Nodes, metrics.Node{Role: n.Role, State: string(n.State)})
	}
	for _, le := range d.inv.Leases() {
		if !le.Declined {
			c.Leases++
		}
	}
	for _, ri := range d.roleImages.get() {
		c.Images = append(c.Images, metrics.Image{Role: ri.Role, Image: ri.Image, Version: ri.Version})
	}
	return c
}
