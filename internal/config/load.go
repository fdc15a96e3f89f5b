package config

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/labcluster/gpucluster/internal/tomlpos"
)

// origin records where Load found each value. loaded keeps the values as
// the file set them, so that a value changed afterwards (by a command-line
// flag) is no longer blamed on the file.
type origin struct {
	file   string
	lines  map[string]int // key -> line, for every key in the file
	loaded Config
}

// Load returns Default() overlaid by the keys of the TOML file at path, and
// validated without a server address (see Validate). Errors about the file's
// content are *Error values naming path, line and key.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	c, err := parse(path, string(data))
	if err == nil {
		err = c.Validate(netip.Addr{})
	}
	if err != nil {
		return Config{}, err
	}
	return c, nil
}

// FromFile reports whether key (e.g. "log_format") holds the value the file Load read gave it.
// A default from elsewhere (dist/bootd.service's BOOTD_LOG_FORMAT) must not replace that.
func (c Config) FromFile(key string) bool {
	_, ok := c.fileLine(key)
	return ok
}

// parse decodes data over the defaults; it checks syntax, keys and types,
// leaving the meaning of the values to Validate.
func parse(path, data string) (Config, error) {
	var m map[string]any
	doc, err := tomlpos.Decode(path, data, &m)
	if err != nil {
		return Config{}, err
	}
	c := Default()
	o := &origin{file: path, lines: doc.Lines}
	for _, k := range doc.Keys() {
		o.lines[k.String()] += 0 // in the file, even where the scanner missed it
		if err := c.set(k, lookup(m, k)); err != nil {
			return Config{}, &Error{File: path, Line: o.lines[k.String()], Key: k.String(), Msg: err.Error()}
		}
	}
	c.withBMCDefaults()
	o.loaded = c
	c.origin = o
	return c, nil
}

// set stores the value v of key k in c, or says why it cannot.
func (c *Config) set(k toml.Key, v any) error {
	name := k.String()
	switch k[0] {
	case "users":
		return c.setUser(k, v)
	case "bmc":
		return c.setBMC(k, v)
	case "node_images":
		return c.setNodeImage(k, v)
	case "disks":
		return c.setDisk(k, v)
	}
	if f, ok := fields[name]; ok {
		return f.set(c, v)
	}
	if slices.Contains(tables, name) {
		if _, ok := v.(map[string]any); !ok {
			return fmt.Errorf("want a table ([%s]), got %s", name, tomlpos.TypeName(v))
		}
		return nil
	}
	return unknownKey(k)
}

// unknownKey names the keys that are allowed where k was found.
func unknownKey(k toml.Key) error {
	parent := strings.Join(k[:len(k)-1], ".")
	var known []string
	for name := range fields {
		if p, leaf, _ := cutLast(name); p == parent {
			known = append(known, leaf)
		}
	}
	if parent == "" {
		known = append(known, tables...)
		return fmt.Errorf("unknown key (known: %s)", strings.Join(sorted(known), ", "))
	}
	if len(known) == 0 {
		return errors.New("unknown key")
	}
	return fmt.Errorf("unknown key (known in [%s]: %s)", parent, strings.Join(sorted(known), ", "))
}

func cutLast(name string) (parent, leaf string, ok bool) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return "", name, false
	}
	return name[:i], name[i+1:], true
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

// lookup returns the value of key k in the decoded document m.
func lookup(m map[string]any, k toml.Key) any {
	var v any = m
	for _, part := range k {
		t, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = t[part]
	}
	return v
}

// tables are the file's sections.
var tables = []string{"ports", "network", "discovery", "master", "compute", "slurm", "users", "bmc", "uefi", "node_images", "writable", "disks"}

// field decodes one key into a Config and reads it back.
type field struct {
	set func(c *Config, v any) error
	get func(c *Config) any
}

// fields is the file format: every key and the Config field it sets.
var fields = map[string]field{
	"interface":     of(asString, func(c *Config) *string { return &c.Interface }),
	"state_dir":     of(asPath, func(c *Config) *string { return &c.StateDir }),
	"images_dir":    of(asPath, func(c *Config) *string { return &c.ImagesDir }),
	"ipxe_dir":      of(asPath, func(c *Config) *string { return &c.IPXEDir }),
	"fetch_program": of(asPath, func(c *Config) *string { return &c.FetchProgram }),
	"log_format":    of(asString, func(c *Config) *string { return &c.LogFormat }),

	"ports.dhcp": of(asInt, func(c *Config) *int { return &c.Ports.DHCP }),
	"ports.tftp": of(asInt, func(c *Config) *int { return &c.Ports.TFTP }),
	"ports.http": of(asInt, func(c *Config) *int { return &c.Ports.HTTP }),

	"network.subnet":     of(asPrefix, func(c *Config) *netip.Prefix { return &c.Network.Subnet }),
	"network.gateway":    of(asOptAddr, func(c *Config) *netip.Addr { return &c.Network.Gateway }),
	"network.dns":        of(asAddrs, func(c *Config) *[]netip.Addr { return &c.Network.DNS }),
	"network.domain":     of(asString, func(c *Config) *string { return &c.Network.Domain }),
	"network.lease_time": of(asDuration, func(c *Config) *time.Duration { return &c.Network.LeaseTime }),

	"discovery.pool_start": of(asAddr, func(c *Config) *netip.Addr { return &c.Discovery.PoolStart }),
	"discovery.pool_end":   of(asAddr, func(c *Config) *netip.Addr { return &c.Discovery.PoolEnd }),
	"discovery.lease_time": of(asDuration, func(c *Config) *time.Duration { return &c.Discovery.LeaseTime }),

	"master.name":        of(asString, func(c *Config) *string { return &c.Master.Name }),
	"master.address":     of(asAddr, func(c *Config) *netip.Addr { return &c.Master.Address }),
	"master.image":       of(asString, func(c *Config) *string { return &c.Master.Image }),
	"master.version":     of(asString, func(c *Config) *string { return &c.Master.Version }),
	"master.ntp_servers": of(asStrings, func(c *Config) *[]string { return &c.Master.NTPServers }),

	"compute.prefix":        of(asString, func(c *Config) *string { return &c.Compute.Prefix }),
	"compute.first_address": of(asAddr, func(c *Config) *netip.Addr { return &c.Compute.FirstAddress }),
	"compute.max_nodes":     of(asInt, func(c *Config) *int { return &c.Compute.MaxNodes }),
	"compute.image":         of(asString, func(c *Config) *string { return &c.Compute.Image }),
	"compute.version":       of(asString, func(c *Config) *string { return &c.Compute.Version }),

	"slurm.cluster_name":    of(asString, func(c *Config) *string { return &c.Slurm.ClusterName }),
	"slurm.proctrack_type":  of(asString, func(c *Config) *string { return &c.Slurm.ProctrackType }),
	"slurm.task_plugin":     of(asString, func(c *Config) *string { return &c.Slurm.TaskPlugin }),
	"slurm.suspend_time":    of(asDuration, func(c *Config) *time.Duration { return &c.Slurm.SuspendTime }),
	"slurm.suspend_timeout": of(asDuration, func(c *Config) *time.Duration { return &c.Slurm.SuspendTimeout }),
	"slurm.resume_timeout":  of(asDuration, func(c *Config) *time.Duration { return &c.Slurm.ResumeTimeout }),

	"uefi.loader":   of(asString, func(c *Config) *string { return &c.UEFI.Loader }),
	"uefi.snponly":  of(asStrings, func(c *Config) *[]string { return &c.UEFI.SNPOnly }),
	"uefi.fallback": of(asBool, func(c *Config) *bool { return &c.UEFI.Fallback }),

	"writable.ram": of(asString, func(c *Config) *string { return &c.Writable.RAM }),
}

// of ties a decoder to the Config field at ptr.
func of[T any](decode func(any) (T, error), ptr func(*Config) *T) field {
	return field{
		set: func(c *Config, v any) error {
			t, err := decode(v)
			if err == nil {
				*ptr(c) = t
			}
			return err
		},
		get: func(c *Config) any { return *ptr(c) },
	}
}

func asString(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", typeError("a string", v)
	}
	return s, nil
}

// asPath wants an absolute path: relative to what would be a guess, since
// bootd may be started from any directory.
func asPath(v any) (string, error) {
	s, err := asString(v)
	if err == nil && s != "" && !filepath.IsAbs(s) {
		err = fmt.Errorf("%q is not an absolute path", s)
	}
	return s, err
}

func asBool(v any) (bool, error) {
	b, ok := v.(bool)
	if !ok {
		return false, typeError("true or false", v)
	}
	return b, nil
}

func asInt(v any) (int, error) {
	n, ok := v.(int64)
	if !ok {
		return 0, typeError("an integer", v)
	}
	if n < math.MinInt || n > math.MaxInt {
		return 0, fmt.Errorf("%d is out of range", n)
	}
	return int(n), nil
}

func asPrefix(v any) (netip.Prefix, error) {
	s, err := asString(v)
	if err != nil {
		return netip.Prefix{}, err
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("%q is not a CIDR (want e.g. 10.80.0.0/24)", s)
	}
	return p, nil
}

func asAddr(v any) (netip.Addr, error) {
	s, err := asString(v)
	if err != nil {
		return netip.Addr{}, err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, fmt.Errorf("%q is not an IP address (want e.g. 10.80.0.100)", s)
	}
	return a, nil
}

// asOptAddr is asAddr where "" means none, so a file can also spell out
// that there is no gateway.
func asOptAddr(v any) (netip.Addr, error) {
	if s, ok := v.(string); ok && s == "" {
		return netip.Addr{}, nil
	}
	return asAddr(v)
}

func asAddrs(v any) ([]netip.Addr, error) { return asList(v, asAddr) }

// asStrings wants an array of strings; what each may hold is Validate's business.
func asStrings(v any) ([]string, error) { return asList(v, asString) }

// asList wants an array (of strings, for the config's lists) whose every item converts with item.
func asList[T any](v any, item func(any) (T, error)) ([]T, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, typeError("an array of strings", v)
	}
	out := make([]T, 0, len(list))
	for i, e := range list {
		x, err := item(e)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i+1, err)
		}
		out = append(out, x)
	}
	return out, nil
}

func asDuration(v any) (time.Duration, error) {
	s, err := asString(v)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (want e.g. 90s, 2m, 1h)", s)
	}
	return d, nil
}

func typeError(want string, v any) error {
	return fmt.Errorf("want %s, got %s", want, tomlpos.TypeName(v))
}
