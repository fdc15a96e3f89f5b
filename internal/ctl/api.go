package ctl

import (
	"encoding/json"
	"net/netip"
	"time"

	"github.com/labcluster/gpucluster/internal/check"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/power"
)

// SocketName is the control socket's file name in the state directory.
const SocketName = "bootd.sock"

// NodesReply is the answer to GET /v1/nodes.
type NodesReply struct {
	Nodes   []inventory.Node    `json:"nodes"`
	Waiting []inventory.Machine `json:"waiting"`
	Leases  []inventory.Lease   `json:"leases,omitempty"`
	Server  ServerInfo          `json:"server"`
	// Power is what bootd last learned of each node's power, by node name: from its BMC, polled
	// every minute and after every power action, or the magic packets sent to a node without one.
	Power map[string]power.Result `json:"power,omitempty"`

	// NotStarted are PCs that fetched a first-stage loader and never started it.
	NotStarted []LoaderTrouble `json:"loader_not_started,omitempty"`

	// Roots is where each node's root came from at its last boot, by node name, as the node
	// reported it once it held the root checked (nodes booted without bootd-fetch report nothing).
	Roots map[string]Root `json:"roots,omitempty"`
}

// LoaderTrouble is a PC that fetched iPXE and never ran it: a board that hangs in ipxe.efi, or
// Secure Boot refusing the unsigned binary. Advice says what to do.
type LoaderTrouble struct {
	MAC         string         `json:"mac"`
	Node        string         `json:"node,omitempty"` // its name, when it is assigned
	Fetched     map[string]int `json:"fetched"`        // loader -> times fetched and never started
	LastFetched time.Time      `json:"last_fetched"`
	Next        string         `json:"next_loader"` // what its next netboot gets
	Advice      string         `json:"advice"`
}

// Root is a node's report on its root image: Source "chunks", "whole" or "cache"; Storage "ram"
// or "disk"; the bytes, and where they came from.
type Root struct {
	Source       string    `json:"source"`
	Storage      string    `json:"storage"`
	Size         int64     `json:"size"`
	FromBootd    int64     `json:"from_bootd"`
	FromPeers    int64     `json:"from_peers"`
	FromSeeds    int64     `json:"from_seeds"`
	PeersDropped int       `json:"peers_dropped"`
	Seconds      float64   `json:"seconds"`
	At           time.Time `json:"at"`
}

// MarshalJSON writes nodes and waiting as arrays even when there are none: a fresh daemon's
// inventory has nil lists, and `jq '.nodes[]'` fails on null where it yields nothing for [].
func (r NodesReply) MarshalJSON() ([]byte, error) {
	type plain NodesReply // without this method
	p := plain(r)
	if p.Nodes == nil {
		p.Nodes = []inventory.Node{}
	}
	if p.Waiting == nil {
		p.Waiting = []inventory.Machine{}
	}
	return json.Marshal(p)
}

// ServerInfo says where the daemon serves, for people reading `bootd nodes`.
type ServerInfo struct {
	Interface string     `json:"interface"`
	Address   netip.Addr `json:"address"`
	Started   time.Time  `json:"started"`
}

// AssignRequest is the body of POST /v1/assign.
type AssignRequest struct {
	Name    string `json:"name"`
	MAC     string `json:"mac,omitempty"`
	Replace bool   `json:"replace,omitempty"`
	// EK is the machine's TPM endorsement key as the admin has it (bootd assign --ek FILE: the
	// file's bytes, PEM or DER), pinned on the node; nil: recorded at the node's first boot.
	EK []byte `json:"ek,omitempty"`
}

// AssignReply is the answer to POST /v1/assign: the node as bound, the machine it replaced, and
// the image it will boot.
type AssignReply struct {
	inventory.Node
	// Replaced is the MAC that held the name until this assign moved it (--replace). bootd forgot
	// that machine: netbooted again, it waits to be named.
	Replaced string    `json:"replaced,omitempty"`
	Image    BootImage `json:"image"`
}

// BootImage is the image a node's role boots, as the daemon finds it when asked. An empty
// Version means no version verifies (none built, or all broken): the node waits at its boot
// screen, asking again every few seconds, until one does.
type BootImage struct {
	Name    string `json:"name"`              // the role's image, e.g. "compute"
	Pinned  string `json:"pinned,omitempty"`  // the version the configuration pins, if any
	Version string `json:"version,omitempty"` // the version the node boots; "": none verifies
	Dir     string `json:"dir"`               // the daemon's images directory, where it looks
	Problem string `json:"problem,omitempty"` // why no version verifies
	// Verifying: bootd was still hashing the files of a version it had not seen (a large new
	// image) when it answered; the node boots the version that verifies once that ends.
	Verifying bool `json:"verifying,omitempty"`
}

// UnassignRequest is the body of POST /v1/unassign.
type UnassignRequest struct {
	Name string `json:"name"`
}

// ErrorReply is the body of every failed request.
type ErrorReply struct {
	Error string `json:"error"`
	// Waiting lists the machines to choose from when an assign without --mac was ambiguous.
	Waiting []inventory.Machine `json:"waiting,omitempty"`
}

// PowerRequest is the body of POST /v1/power: an action on nodes named as host lists
// ("c[1-4]", "master").
type PowerRequest struct {
	Action string   `json:"action"` // on, off, cycle or status
	Nodes  []string `json:"nodes"`
}

// PowerReply is the answer to POST /v1/power: one result per node, in the order named.
type PowerReply struct {
	Results []power.Result `json:"results"`
}

// BMCPasswordRequest is the body of POST /v1/bmc-password. An empty Node sets the default
// password, which every BMC without one of its own uses.
type BMCPasswordRequest struct {
	Node     string `json:"node,omitempty"`
	Password string `json:"password"`
}

// String redacts the password: a request may end up in an error message.
func (r BMCPasswordRequest) String() string { return "BMC password for " + r.Node + " (redacted)" }

// Names is the answer to GET /v1/names, what shell completion offers: node names, the MACs of
// the machines waiting to be named, and the names an assign would give next (the master's
// while it has no machine, and the first free compute name).
type Names struct {
	Nodes   []string `json:"nodes"`
	Waiting []string `json:"waiting"`
	Free    []string `json:"free"`
}

// CheckRequest is the body of POST /v1/check: the nodes to check, every assigned node when none.
type CheckRequest struct {
	Names []string `json:"names,omitempty"`
}

// CheckEvent is one line of POST /v1/check's answer, which is newline-delimited JSON: progress
// while the check runs, then the report (or an error, for a check that could not run).
type CheckEvent struct {
	Progress string        `json:"progress,omitempty"`
	Report   *check.Report `json:"report,omitempty"`
	Error    string        `json:"error,omitempty"`
}
