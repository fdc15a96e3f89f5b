package ctl

import (
	"net/netip"
	"time"

	"github.com/labcluster/gpucluster/internal/inventory"
)

// SocketName is the control socket's file name in the state directory.
const SocketName = "bootd.sock"

// NodesReply is the answer to GET /v1/nodes.
type NodesReply struct {
	Nodes   []inventory.Node    `json:"nodes"`
	Waiting []inventory.Machine `json:"waiting"`
	Leases  []inventory.Lease   `json:"leases,omitempty"`
	Server  ServerInfo          `json:"server"`
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
