package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ErrNoRole is wrapped by Place's error for a name that fits no role.
var ErrNoRole = errors.New("name fits no role")

// Placement is where a node goes: its role, address and image.
type Placement struct {
	Name    string
	Role    string // "master" or "compute"
	Address netip.Addr
	Image   string
	Version string // "" = newest verified version
}

// Place returns the placement of the node called name: the master name, or
// the compute prefix followed by a node number 1..MaxNodes without leading
// zeros (so that every node has exactly one name).
func (c Config) Place(name string) (Placement, error) {
	p, err := c.place(name)
	if err != nil {
		return p, err
	}
	// [node_images]: this node boots another image than its role's (the newest version of it).
	if img, ok := c.NodeImages[name]; ok && img != p.Image {
		p.Image, p.Version = img, ""
	}
	return p, nil
}

// place is Place by role alone.
func (c Config) place(name string) (Placement, error) {
	if name == c.Master.Name {
		m := c.Master
		return Placement{Name: name, Role: "master", Address: m.Address, Image: m.Image, Version: m.Version}, nil
	}
	n, err := c.computeNumber(name)
	if err != nil {
		return Placement{}, err
	}
	addr, ok := addN(c.Compute.FirstAddress, n-1)
	if !ok {
		return Placement{}, fmt.Errorf("place %q: address beyond IPv4 (is the config validated?)", name)
	}
	cr := c.Compute
	return Placement{Name: name, Role: "compute", Address: addr, Image: cr.Image, Version: cr.Version}, nil
}

// computeNumber returns N for the compute node name prefix+N.
func (c Config) computeNumber(name string) (int, error) {
	digits, ok := strings.CutPrefix(name, c.Compute.Prefix)
	if !ok || digits == "" || digits[0] == '0' || strings.Trim(digits, "0123456789") != "" {
		return 0, c.noRole(name, "")
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n > c.Compute.MaxNodes {
		return 0, c.noRole(name, fmt.Sprintf(" (compute.max_nodes is %d)", c.Compute.MaxNodes))
	}
	return n, nil
}

func (c Config) noRole(name, why string) error {
	return &noRoleError{fmt.Sprintf("name %q fits no role: use %q or %s..%s%s",
		name, c.Master.Name, c.ComputeName(1), c.ComputeName(c.Compute.MaxNodes), why)}
}

// noRoleError keeps Place's message free of ErrNoRole's text while still
// matching it with errors.Is.
type noRoleError struct{ msg string }

func (e *noRoleError) Error() string { return e.msg }
func (e *noRoleError) Unwrap() error { return ErrNoRole }
