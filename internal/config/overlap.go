package config

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
)

// span is a run of addresses that one role owns, and the keys that set its two ends.
type span struct {
	what           string
	loKeys, hiKeys []string // compute's last address follows from two keys
	lo, hi         netip.Addr
}

func (s span) String() string { return s.describe("") }

// describe is s with note (where it comes from) inside its parentheses.
func (s span) describe(note string) string {
	if s.lo == s.hi {
		return fmt.Sprintf("%s (%s%s)", s.what, s.lo, note)
	}
	return fmt.Sprintf("%s (%s-%s%s)", s.what, s.lo, s.hi, note)
}

func (s span) overlaps(t span) bool {
	return s.lo.Compare(t.hi) <= 0 && t.lo.Compare(s.hi) <= 0
}

// keys are all the keys that set s, each once.
func (s span) keys() []string {
	k := slices.Clone(s.loKeys)
	for _, h := range s.hiKeys {
		if !slices.Contains(k, h) {
			k = append(k, h)
		}
	}
	return k
}

// facing are the keys of the ends of s that lie inside t, which overlaps s: where the two
// meet. When s holds t inside it, both ends are to blame.
func (s span) facing(t span) []string {
	var k []string
	if s.lo.Compare(t.lo) >= 0 {
		k = append(k, s.loKeys...)
	}
	if s.hi.Compare(t.hi) <= 0 {
		k = append(k, s.hiKeys...)
	}
	if k == nil {
		return s.keys()
	}
	return k
}

// spans lists the addresses of the plan by role: the gateway and those
// handed out. Call it on a config whose addresses have been checked.
func (c Config) spans() []span {
	var s []span
	if gw := c.Network.Gateway; gw.IsValid() {
		k := []string{"network.gateway"}
		s = append(s, span{"the gateway", k, k, gw, gw})
	}
	return append(s, c.handedOut()...)
}

// handedOut lists the addresses bootd gives to machines: nodes and the pool.
func (c Config) handedOut() []span {
	m := c.Master.Address
	last, _ := addN(c.Compute.FirstAddress, c.Compute.MaxNodes-1)
	return []span{
		{"the master", []string{"master.address"}, []string{"master.address"}, m, m},
		{fmt.Sprintf("compute nodes %s..%s", c.ComputeName(1), c.ComputeName(c.Compute.MaxNodes)),
			[]string{"compute.first_address"}, []string{"compute.first_address", "compute.max_nodes"}, c.Compute.FirstAddress, last},
		{"the discovery pool", []string{"discovery.pool_start"}, []string{"discovery.pool_end"},
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
			return c.errorf(s.keys(), "bootd's own address %s is taken by %s: give the interface another address, or move the range", server, s)
		}
	}
	return nil
}

// overlapError names both ranges and where each was set: the admin moved one of them into the
// other, and only the admin knows which. The error is located at the one more likely moved,
// and its message gives the other's file:line: key (or says it is the default).
func (c Config) overlapError(a, b span) error {
	ka, kb := c.blame(a, b), c.blame(b, a)
	if c.leads(b, kb, a, ka) {
		a, b, ka, kb = b, a, kb, ka
	}
	return c.err(ka, "%s and %s overlap", a, c.withSource(b, kb))
}

// blame picks the key to name for s's part in its overlap with t, likeliest the admin's edit
// first: one the file set away from its default, then any the file set, each from the ends
// of s that meet t before s's other keys. With none from the file, the last facing key.
func (c Config) blame(s, t span) string {
	facing := s.facing(t)
	for _, moved := range []bool{true, false} {
		for _, keys := range [][]string{facing, s.keys()} {
			if k, ok := c.lastSet(keys, moved); ok {
				return k
			}
		}
	}
	return facing[len(facing)-1]
}

// lastSet returns the key of keys on the file's last line, of those away from their default
// only when moved.
func (c Config) lastSet(keys []string, moved bool) (string, bool) {
	best, bestLine := "", 0
	for _, k := range keys {
		if line, ok := c.fileLine(k); ok && line > bestLine && (!moved || !c.isDefault(k)) {
			best, bestLine = k, line
		}
	}
	return best, bestLine > 0
}

// leads reports whether an overlap is better told from s's side than from t's: s left its
// default and t did not, or else (both or neither did) the file set s's key later, as errorf.
func (c Config) leads(s span, ks string, t span, kt string) bool {
	if sm, tm := c.moved(s), c.moved(t); sm != tm {
		return sm
	}
	return c.errorf([]string{kt, ks}, "").Key == ks
}

// moved reports whether any key of s holds another value than Default's.
func (c Config) moved(s span) bool {
	return slices.ContainsFunc(s.keys(), func(k string) bool { return !c.isDefault(k) })
}

func (c Config) isDefault(key string) bool {
	d := Default()
	f := fields[key]
	return reflect.DeepEqual(f.get(&c), f.get(&d))
}

// withSource describes s with where its addresses come from: key's file:line, or the defaults.
// A config built in code has no such story to tell.
func (c Config) withSource(s span, key string) string {
	if line, ok := c.fileLine(key); ok {
		return s.describe(fmt.Sprintf(", %s:%d: %s", c.origin.file, line, key))
	}
	if c.origin != nil && !c.moved(s) {
		return s.describe(" by default")
	}
	return s.String()
}
