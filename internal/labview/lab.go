// Package labview is the lab as people and monitoring see it, read-only: the web page of the lab
// (html/template and embed, no build step), its JSON, and Prometheus HTTP service discovery of the
// nodes. It takes a snapshot from a Source and never changes anything.
package labview

import (
	"fmt"
	"net/netip"
	"time"
)

// Lab is one snapshot of the lab, as the page and its JSON show it.
type Lab struct {
	Taken   time.Time   `json:"taken"`
	Server  Server      `json:"server"`
	Nodes   []Node      `json:"nodes"`
	Waiting []Machine   `json:"waiting"`
	Images  []RoleImage `json:"images"`
}

// Server says where bootd serves.
type Server struct {
	Interface string     `json:"interface"`
	Address   netip.Addr `json:"address"`
	Started   time.Time  `json:"started"`
}

// Node is one assigned node.
type Node struct {
	Name    string     `json:"name"`
	Role    string     `json:"role"`
	MAC     string     `json:"mac"`
	Address netip.Addr `json:"address"`
	// State is the inventory's: assigned, booting, up, ready.
	State string `json:"state"`
	// Stage is the last step bootd saw of the node's current boot (a DHCP lease, its boot script,
	// a file of its image), StageAt when; "" when bootd saw none since it started.
	Stage   string    `json:"stage,omitempty"`
	StageAt time.Time `json:"stage_at,omitzero"`
	// Image and Version are what the node last fetched its boot script for, since bootd started.
	Image    string    `json:"image,omitempty"`
	Version  string    `json:"version,omitempty"`
	Hardware *Hardware `json:"hardware,omitempty"` // nil until the node reported it
	Vendor   string    `json:"vendor,omitempty"`   // manufacturer and product, as its firmware told
	Serial   string    `json:"serial,omitempty"`
	LastSeen time.Time `json:"last_seen,omitzero"`
	// Power is the node's power state when bootd knows it ("on", "off"), else "".
	Power string `json:"power,omitempty"`
}

// Hardware is what a node reported (slurmd -C, its GPUs).
type Hardware struct {
	CPUs      int    `json:"cpus"`
	MemoryMiB int    `json:"memory_mib"`
	GPUs      int    `json:"gpus"`
	GPUType   string `json:"gpu_type,omitempty"`
}

// String summarises it as `bootd nodes` does: "8 CPUs, 15.5 GiB, 2 GPUs (rtx3090)".
func (h *Hardware) String() string {
	if h == nil {
		return ""
	}
	s := fmt.Sprintf("%d CPUs, %.1f GiB", h.CPUs, float64(h.MemoryMiB)/1024)
	if h.CPUs == 1 {
		s = fmt.Sprintf("1 CPU, %.1f GiB", float64(h.MemoryMiB)/1024)
	}
	if h.GPUs > 0 {
		s += fmt.Sprintf(", %d GPUs (%s)", h.GPUs, h.GPUType)
	}
	return s
}

// Machine is a machine waiting to be named.
type Machine struct {
	MAC      string     `json:"mac"`
	Vendor   string     `json:"vendor,omitempty"`
	Serial   string     `json:"serial,omitempty"`
	UUID     string     `json:"uuid,omitempty"`
	Firmware string     `json:"firmware,omitempty"` // e.g. pcbios/i386, efi/x86_64
	Address  netip.Addr `json:"address,omitzero"`   // its discovery lease, when it holds one
	// FirstSeen and LastSeen: when it first asked and last asked (it asks every few seconds
	// while it waits at its discovery screen).
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Stands says where it is now, for a person; Command is what names it.
	Stands  string `json:"stands"`
	Command string `json:"command"`
}

// RoleImage is the image version a role boots.
type RoleImage struct {
	Role    string `json:"role"`
	Image   string `json:"image"`
	Version string `json:"version,omitempty"` // "" while none verifies
	Pinned  bool   `json:"pinned,omitempty"`
	Problem string `json:"problem,omitempty"` // why none verifies, or that it is being verified
	Nodes   int    `json:"nodes"`             // assigned nodes of the role
}

// Source is what the views read: a snapshot of the lab (internal/bootd adapts its inventory).
type Source interface {
	Lab() Lab
}

// staleAfter: a machine at its discovery screen asks bootd every few seconds (httpd's
// PollInterval); one silent for longer has left the screen.
const staleAfter = 30 * time.Second

// Stands says where a waiting machine is, from when it last asked.
func Stands(m Machine, now time.Time) string {
	since := now.Sub(m.LastSeen).Round(time.Second)
	if since <= staleAfter {
		return "at its discovery screen, asking every few seconds (last " + since.String() + " ago)"
	}
	return "silent for " + since.String() + ": switched off, or booted from elsewhere; it waits again at its next netboot"
}

// NextNames are the names `bootd assign` would give the waiting machines, in order: master while
// no node holds it, then the lowest free cN (prefix and limit from the configuration).
func NextNames(taken []string, master, prefix string, maxNodes, n int) []string {
	used := map[string]bool{}
	for _, t := range taken {
		used[t] = true
	}
	var out []string
	if !used[master] && n > 0 {
		out = append(out, master)
		used[master] = true
	}
	for i := 1; i <= maxNodes && len(out) < n; i++ {
		if name := fmt.Sprintf("%s%d", prefix, i); !used[name] {
			out = append(out, name)
		}
	}
	return out
}

// AssignCommand is the command that names the machine with mac.
func AssignCommand(name, mac string) string {
	if name == "" {
		name = "NAME"
	}
	return "bootd assign " + name + " --mac " + mac
}
