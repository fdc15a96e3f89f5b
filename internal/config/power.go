package config

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/labcluster/gpucluster/internal/tomlpos"
)

// BMCs say how bootd reaches the nodes' baseboard management controllers: [bmc] holds the
// defaults, [bmc.NAME] one node's BMC. A node without one is woken with Wake-on-LAN. Passwords
// are not kept here: `bootd power password` hands them to the daemon, which keeps them with the
// other secrets in its state directory.
type BMCs struct {
	User     string // default user of a [bmc.NAME] that names none; default "ADMIN"
	Protocol string // default protocol; default "ipmi"
	Nodes    []BMC  // in the file's order
}

// BMC is one node's BMC.
type BMC struct {
	Node     string // the [bmc.NAME] table's name: a node name
	Protocol string // "ipmi" (IPMI 2.0 over LAN, through ipmitool) or "redfish"
	Address  string // host or host:port (default port: 623 for ipmi, 443 for redfish)
	User     string
}

// Protocols bootd speaks to BMCs.
const (
	ProtocolIPMI    = "ipmi"
	ProtocolRedfish = "redfish"
)

// BMCOf returns node's BMC, and false when it has none (Wake-on-LAN).
func (c Config) BMCOf(node string) (BMC, bool) {
	i := slices.IndexFunc(c.BMC.Nodes, func(b BMC) bool { return b.Node == node })
	if i < 0 {
		return BMC{}, false
	}
	return c.BMC.Nodes[i], true
}

// bmcDefaults are the keys of [bmc] itself; any other key there is a node's table.
var bmcDefaults = map[string]func(b *BMCs, v any) error{
	"user":     func(b *BMCs, v any) (err error) { b.User, err = asString(v); return err },
	"protocol": func(b *BMCs, v any) (err error) { b.Protocol, err = asString(v); return err },
}

// bmcFields are the keys of a [bmc.NAME] table.
var bmcFields = map[string]func(b *BMC, v any) error{
	"protocol": func(b *BMC, v any) (err error) { b.Protocol, err = asString(v); return err },
	"address":  func(b *BMC, v any) (err error) { b.Address, err = asString(v); return err },
	"user":     func(b *BMC, v any) (err error) { b.User, err = asString(v); return err },
}

// setBMC stores key k (under [bmc]) in c: the [bmc] table, a default, a node's table or a
// node's field.
func (c *Config) setBMC(k toml.Key, v any) error {
	if len(k) == 2 {
		if set, ok := bmcDefaults[k[1]]; ok {
			return set(&c.BMC, v)
		}
	}
	if len(k) < 3 {
		if _, ok := v.(map[string]any); !ok {
			return fmt.Errorf("want a table ([%s]) or one of %s, got %s", k, strings.Join(slices.Sorted(maps.Keys(bmcDefaults)), ", "), tomlpos.TypeName(v))
		}
		if len(k) == 2 {
			c.bmc(k[1])
		}
		return nil
	}
	set, ok := bmcFields[k[2]]
	if len(k) == 3 && k[2] == "password" {
		return fmt.Errorf("passwords are not kept in the config file: give it to the running bootd with `bootd power password %s`", k[1])
	}
	if len(k) > 3 || !ok {
		return fmt.Errorf("unknown key (known in [bmc.NAME]: %s)", strings.Join(slices.Sorted(maps.Keys(bmcFields)), ", "))
	}
	return set(c.bmc(k[1]), v)
}

// bmc returns the BMC of node, added if c has none yet. Protocol and user stay empty until
// withBMCDefaults fills in the defaults once the whole file is read: [bmc] may set them after
// the node's table.
func (c *Config) bmc(node string) *BMC {
	i := slices.IndexFunc(c.BMC.Nodes, func(b BMC) bool { return b.Node == node })
	if i < 0 {
		c.BMC.Nodes = append(c.BMC.Nodes, BMC{Node: node})
		i = len(c.BMC.Nodes) - 1
	}
	return &c.BMC.Nodes[i]
}

// withBMCDefaults fills in the [bmc] defaults where a node's table names no protocol or user.
func (c *Config) withBMCDefaults() {
	for i := range c.BMC.Nodes {
		b := &c.BMC.Nodes[i]
		if b.Protocol == "" {
			b.Protocol = c.BMC.Protocol
		}
		if b.User == "" {
			b.User = c.BMC.User
		}
	}
}

// checkBMCs wants every [bmc.NAME] to be a node's, with a protocol bootd speaks, an address
// and a user.
func (c Config) checkBMCs() error {
	if err := checkProtocol(c.BMC.Protocol); err != nil {
		return c.err("bmc.protocol", "%v", err)
	}
	if err := checkBMCUser(c.BMC.User); err != nil {
		return c.err("bmc.user", "%v", err)
	}
	for _, b := range c.BMC.Nodes {
		key := toml.Key{"bmc", b.Node}.String()
		if _, err := c.Place(b.Node); err != nil {
			return c.err(key, "[bmc.%s] is not a node's: %v", b.Node, err)
		}
		if err := checkProtocol(b.Protocol); err != nil {
			return c.err(key+".protocol", "%v", err)
		}
		if err := checkBMCAddress(b.Address); err != nil {
			if b.Address == "" {
				return c.err(key, "no address: %v", err)
			}
			return c.err(key+".address", "%v", err)
		}
		if err := checkBMCUser(b.User); err != nil {
			return c.err(key+".user", "%v", err)
		}
	}
	return nil
}

func checkProtocol(p string) error {
	if p != ProtocolIPMI && p != ProtocolRedfish {
		return fmt.Errorf("unknown BMC protocol %q (want %q or %q)", p, ProtocolIPMI, ProtocolRedfish)
	}
	return nil
}

// checkBMCAddress wants a host name or IP address, with a port or without.
func checkBMCAddress(a string) error {
	if a == "" {
		return fmt.Errorf("want the BMC's address = \"10.80.1.11\" or \"bmc-c1.lab:623\"")
	}
	host, port := a, ""
	if h, p, err := net.SplitHostPort(a); err == nil {
		host, port = h, p
	}
	if !validHost(host) {
		return fmt.Errorf("%q is not a host name or IP address, with an optional :port", a)
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q: port %q is out of range (want 1-65535)", a, port)
		}
	}
	return nil
}

// checkBMCUser wants a user name that fits one argument: ipmitool and Redfish take it as is.
func checkBMCUser(u string) error {
	if u == "" || len(u) > 64 || hasControl(u) || strings.ContainsAny(u, " :") {
		return fmt.Errorf("%q is not a BMC user name (1-64 characters, no blanks, ':' or control characters)", u)
	}
	return nil
}

// checkPowerSaving wants Slurm's power-saving times in whole seconds, as slurm.conf counts them.
func (c Config) checkPowerSaving() error {
	s := c.Slurm
	if s.SuspendTime < 0 || s.SuspendTime%time.Second != 0 {
		return c.err("slurm.suspend_time", "%s is not a whole number of seconds (or 0 for never)", s.SuspendTime)
	}
	for key, d := range map[string]time.Duration{"slurm.suspend_timeout": s.SuspendTimeout, "slurm.resume_timeout": s.ResumeTimeout} {
		if d < time.Second || d%time.Second != 0 {
			return c.err(key, "%s is not a whole, positive number of seconds", d)
		}
	}
	return nil
}
