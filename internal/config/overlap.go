package config

import (
	"fmt"
	"net/netip"
	"slices"
)

// span is a run of addresses that one role owns, and the keys that set it.
type span struct {
	what   string
	keys   []string
	lo, hi netip.Addr
}

func (s span) String() string {
	if s.lo == s.hi {
		return fmt.Sprintf("%s (%s)", s.what, s.lo)
	}
	return fmt.Sprintf("%s (%s-%s)", s.what, s.lo, s.hi)
}

func (s span) overlaps(t span) bool {
	return s.lo.Compare(t.hi) <= 0 && t.lo.Compare(s.hi) <= 0
}

// spans lists the addresses of the plan by role: the gateway and those
// handed out. Call it on a config whose addresses have been checked.
func (c Config) spans() []span {
	var s []span
	if gw := c.Network.Gateway; gw.IsValid() {
		s = append(s, span{"the gateway", []string{"network.gateway"}, gw, gw})
	}
	return append(s, c.handedOut()...)
}

// handedOut lists the addresses bootd gives to machines: nodes and the pool.
func (c Config) handedOut() []span {
	m := c.Master.Address
	last, _ := addN(c.Compute.FirstAddress, c.Compute.MaxNodes-1)
	return []span{
		{"the master", []string{"master.address"}, m, m},
		{fmt.Sprintf("compute nodes %s..%s", c.computeName(1), c.computeName(c.Compute.MaxNodes)),
			[]string{"compute.first_address", "compute.max_nodes"}, c.Compute.FirstAddress, last},
		{"the discovery pool", []string{"discovery.pool_start", "discovery.pool_end"},
			c.Discovery.PoolStart, c.Discovery.PoolEnd},
	}
}

// checkOverlaps keeps the roles' addresses apart: one address, one owner.
func (c Config) checkOverlaps() error {
	s := c.spans()
	for i := range s {
		for _, t := range s[i+1:] {
			if s[i].overlaps(t) {
				return c.overlapError(s[i], t)
			}
		}
	}
	return nil
}

// checkServer wants bootd's own address free in the subnet: a node given
// the same address would cut bootd off. The gateway is the exception: on an
// appliance that also routes for the lab (NAT to the campus network) the
// default route is bootd's own address, and no node or pool address is
// handed out there (checkOverlaps keeps the gateway apart from them).
func (c Config) checkServer(server netip.Addr) error {
	p := c.Network.Subnet
	switch {
	case !server.Is4():
		return c.err("network.subnet", "bootd's own address %s is not IPv4", server)
	case !p.Contains(server):
		return c.err("network.subnet", "bootd's own address %s is outside subnet %s: serve on an interface in the subnet, or change the subnet", server, p)
	case server == p.Addr() || server == broadcast(p):
		return c.err("network.subnet", "bootd's own address %s is the network or broadcast address of %s", server, p)
	}
	for _, s := range c.handedOut() {
		if inRange(server, s.lo, s.hi) {
			return c.errorf(s.keys, "bootd's own address %s is taken by %s: give the interface another address, or move the range", server, s)
		}
	}
	return nil
}

// overlapError names first the span whose key it blames.
func (c Config) overlapError(a, b span) error {
	e := c.errorf(append(append([]string{}, a.keys...), b.keys...), "")
	if slices.Contains(b.keys, e.Key) {
		a, b = b, a
	}
	e.Msg = fmt.Sprintf("%s and %s overlap", a, b)
	return e
}
