package config

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"time"
)

// Validate checks that c is complete and consistent: addresses in the
// subnet, node ranges, pool and gateway apart, names usable as hostnames.
// If server (bootd's own address) is valid, it must also be an address of
// the subnet that no node or pool holds (it may be the gateway). Errors are
// *Error values; a value that came from the file Load read is located by
// file and line.
func (c Config) Validate(server netip.Addr) error {
	checks := []func() error{
		c.checkBasics, c.checkPorts, c.checkSubnet, c.checkNetwork,
		c.checkDiscovery, c.checkCompute, c.checkMaster, c.checkNTPServers, c.checkOverlaps, c.checkSlurm, c.checkPowerSaving, c.checkUsers, c.checkBMCs, c.checkUEFI, c.checkNodeImages, c.checkWritable, c.checkDisks,
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	if server.IsValid() {
		return c.checkServer(server)
	}
	return nil
}

// errorf returns an error about keys that together cause it, naming the one
// the file set last (where the conflict shows), or the last of keys when the
// file set none of them.
func (c Config) errorf(keys []string, format string, args ...any) *Error {
	e := &Error{Key: keys[len(keys)-1], Msg: fmt.Sprintf(format, args...)}
	for _, k := range keys {
		if line, ok := c.fileLine(k); ok && (e.File == "" || line > e.Line) {
			e.File, e.Line, e.Key = c.origin.file, line, k
		}
	}
	return e
}

// fileLine returns the line of key in the loaded file, unless key's value
// has changed since (a flag overrode it): then the file is not to blame.
func (c Config) fileLine(key string) (int, bool) {
	if c.origin == nil {
		return 0, false
	}
	line, ok := c.origin.lines[key]
	if strings.HasPrefix(key, "users.") || strings.HasPrefix(key, "bmc.") || strings.HasPrefix(key, "node_images.") || strings.HasPrefix(key, "disks.") {
		return line, ok // no flag sets users, BMCs, node images or disks
	}
	f, known := fields[key]
	if !ok || !known || !reflect.DeepEqual(f.get(&c), f.get(&c.origin.loaded)) {
		return 0, false
	}
	return line, true
}

func (c Config) err(key, format string, args ...any) *Error {
	return c.errorf([]string{key}, format, args...)
}

func (c Config) checkBasics() error {
	switch {
	case c.LogFormat != "text" && c.LogFormat != "json":
		return c.err("log_format", "unknown log format %q (want \"text\" or \"json\")", c.LogFormat)
	case c.Interface != "" && !validIfName(c.Interface):
		return c.err("interface", "%q is not a network interface name", c.Interface)
	case c.StateDir == "":
		return c.err("state_dir", "must not be empty")
	case c.ImagesDir == "":
		return c.err("images_dir", "must not be empty")
	}
	return nil
}

// validIfName follows Linux: at most 15 bytes, no slash, colon or blank.
func validIfName(s string) bool {
	return len(s) <= 15 && s != "." && s != ".." && !strings.ContainsAny(s, "/: \t\n\x00")
}

func (c Config) checkPorts() error {
	ports := []struct {
		key  string
		port int
	}{{"ports.dhcp", c.Ports.DHCP}, {"ports.tftp", c.Ports.TFTP}, {"ports.http", c.Ports.HTTP}}
	for _, p := range ports {
		if p.port < 1 || p.port > 65535 {
			return c.err(p.key, "port %d is out of range (want 1-65535)", p.port)
		}
	}
	if c.Ports.DHCP == c.Ports.TFTP {
		return c.errorf([]string{"ports.dhcp", "ports.tftp"}, "dhcp and tftp cannot share UDP port %d", c.Ports.DHCP)
	}
	return nil
}

func (c Config) checkSubnet() error {
	const key = "network.subnet"
	p := c.Network.Subnet
	switch {
	case !p.IsValid():
		return c.err(key, "missing")
	case !p.Addr().Is4():
		return c.err(key, "%s is not an IPv4 subnet", p)
	case p.Masked() != p:
		return c.err(key, "%s is not a network address (want %s)", p, p.Masked())
	case p.Bits() > 30:
		return c.err(key, "%s leaves no room for nodes (want /30 or shorter)", p)
	}
	return nil
}

// checkHost wants a an address of the subnet that can be given to a host.
func (c Config) checkHost(key string, a netip.Addr) error {
	switch {
	case !a.IsValid():
		return c.err(key, "missing")
	case !a.Is4():
		return c.err(key, "%s is not an IPv4 address", a)
	}
	return c.checkInSubnet(key, a)
}

// checkInSubnet blames the subnet when only it came from the file; then
// the message names the key whose address no longer fits.
func (c Config) checkInSubnet(key string, a netip.Addr) error {
	p := c.Network.Subnet
	what := ""
	switch {
	case !p.Contains(a):
		what = "is outside subnet"
	case a == p.Addr():
		what = "is the network address of"
	case a == broadcast(p):
		what = "is the broadcast address of"
	default:
		return nil
	}
	e := c.errorf([]string{"network.subnet", key}, "%s %s %s", a, what, p)
	if e.Key != key {
		e.Msg = key + " " + e.Msg
	}
	return e
}

func (c Config) checkNetwork() error {
	n := c.Network
	if n.Gateway.IsValid() {
		if err := c.checkHost("network.gateway", n.Gateway); err != nil {
			return err
		}
	}
	for i, a := range n.DNS {
		if !a.Is4() {
			return c.err("network.dns", "item %d: %s is not an IPv4 address", i+1, a)
		}
	}
	if n.Domain != "" && !validDomain(n.Domain) {
		return c.err("network.domain", "%q is not a domain name", n.Domain)
	}
	return c.checkLease("network.lease_time", n.LeaseTime)
}

// checkLease wants whole seconds' worth: DHCP counts leases in seconds.
func (c Config) checkLease(key string, d time.Duration) error {
	if d <= 0 {
		return c.err(key, "lease must be positive, got %s", d)
	}
	if d < time.Second {
		return c.err(key, "lease %s is shorter than the 1s DHCP can express", d)
	}
	return nil
}

func (c Config) checkDiscovery() error {
	d := c.Discovery
	if err := c.checkHost("discovery.pool_start", d.PoolStart); err != nil {
		return err
	}
	if err := c.checkHost("discovery.pool_end", d.PoolEnd); err != nil {
		return err
	}
	if d.PoolStart.Compare(d.PoolEnd) > 0 {
		return c.errorf([]string{"discovery.pool_start", "discovery.pool_end"},
			"pool start %s is after pool end %s", d.PoolStart, d.PoolEnd)
	}
	return c.checkLease("discovery.lease_time", d.LeaseTime)
}

func (c Config) checkMaster() error {
	m := c.Master
	switch {
	case !validLabel(m.Name):
		return c.err("master.name", "%q is not a hostname (want lowercase letters, digits and -, starting with a letter)", m.Name)
	case c.looksCompute(m.Name):
		return c.errorf([]string{"compute.prefix", "master.name"},
			"%q looks like a compute node name (compute.prefix %q and a number)", m.Name, c.Compute.Prefix)
	}
	if err := c.checkHost("master.address", m.Address); err != nil {
		return err
	}
	return c.checkImage("master", m.Image, m.Version)
}

// looksCompute reports whether name is the compute prefix and digits.
func (c Config) looksCompute(name string) bool {
	n, ok := strings.CutPrefix(name, c.Compute.Prefix)
	return ok && n != "" && strings.Trim(n, "0123456789") == ""
}

func (c Config) checkCompute() error {
	cr := c.Compute
	switch {
	case !validLabel(cr.Prefix + "1"):
		return c.err("compute.prefix", "%q is not a hostname prefix (want lowercase letters, digits and -, starting with a letter)", cr.Prefix)
	case strings.Trim(cr.Prefix[len(cr.Prefix)-1:], "0123456789") == "":
		return c.err("compute.prefix", "%q ends in a digit, which makes names like %s1 hard to read", cr.Prefix, cr.Prefix)
	case cr.MaxNodes < 1:
		return c.err("compute.max_nodes", "%d is too small (want at least 1)", cr.MaxNodes)
	case !validLabel(c.ComputeName(cr.MaxNodes)):
		return c.errorf([]string{"compute.prefix", "compute.max_nodes"}, "node name %s would be longer than 63 characters", c.ComputeName(cr.MaxNodes))
	}
	if err := c.checkHost("compute.first_address", cr.FirstAddress); err != nil {
		return err
	}
	if err := c.checkLast(); err != nil {
		return err
	}
	return c.checkImage("compute", cr.Image, cr.Version)
}

// checkLast wants the last compute node inside the subnet too.
func (c Config) checkLast() error {
	last, ok := addN(c.Compute.FirstAddress, c.Compute.MaxNodes-1)
	p := c.Network.Subnet
	if ok && p.Contains(last) && last != broadcast(p) {
		return nil
	}
	return c.errorf([]string{"network.subnet", "compute.first_address", "compute.max_nodes"},
		"%d compute nodes from %s do not fit in subnet %s", c.Compute.MaxNodes, c.Compute.FirstAddress, p)
}

// ComputeName is the name of compute node n: the prefix and the number, c1 for 1.
func (c Config) ComputeName(n int) string {
	return fmt.Sprintf("%s%d", c.Compute.Prefix, n)
}

func (c Config) checkImage(role, image, version string) error {
	if !validName(image) {
		return c.err(role+".image", "%q is not an image name (want letters, digits, '.', '_' and '-')", image)
	}
	if version != "" && !validName(version) {
		return c.err(role+".version", "%q is not an image version (want letters, digits, '.', '_' and '-')", version)
	}
	return nil
}

// validName accepts what can safely be one directory name under the images
// directory: no separators, no dot-files, nothing to escape.
func validName(s string) bool {
	if s == "" || len(s) > 128 || s[0] == '.' || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !nameChar(byte(r)) && r != '.' || r > 127 {
			return false
		}
	}
	return true
}

// validLabel accepts a lowercase DNS label that starts with a letter; one
// spelling per name keeps Place and DNS in agreement.
func validLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] < 'a' || s[0] > 'z' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// validDomain accepts dot-separated DNS labels; unlike our hostnames,
// they may start with a digit or hold capitals.
func validDomain(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			if !nameChar(l[i]) || l[i] == '_' {
				return false
			}
		}
	}
	return true
}

// checkSlurm keeps the Slurm values to what one slurm.conf token can hold: they are written
// into every node's slurm.conf.
func (c Config) checkSlurm() error {
	for key, v := range map[string]string{"slurm.cluster_name": c.Slurm.ClusterName,
		"slurm.proctrack_type": c.Slurm.ProctrackType, "slurm.task_plugin": c.Slurm.TaskPlugin} {
		if v == "" || strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_/,.-") != "" {
			return c.err(key, "%q is not a Slurm value (letters, digits and _ / , . - only)", v)
		}
	}
	return nil
}

// checkNTPServers wants each entry to be one host name or address: it becomes the NAME of a
// "pool NAME iburst" line in the master's chrony.conf, where a space, a newline or a # would
// add words, directives or a comment.
func (c Config) checkNTPServers() error {
	for i, s := range c.Master.NTPServers {
		if !validHost(s) {
			return c.err("master.ntp_servers", "item %d: %q is not a host name or IP address (want one NTP server or pool per item, e.g. \"2.rocky.pool.ntp.org\")", i+1, s)
		}
	}
	return nil
}

// validHost accepts an IP address without a zone or a DNS name.
func validHost(s string) bool {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Zone() == ""
	}
	return s != "" && validDomain(s)
}

// nameChar reports a character safe in a file or DNS name: ASCII letters and
// digits, _ and -. (TOML's bare keys happen to allow the same; this is about names.)
func nameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
