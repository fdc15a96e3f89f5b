package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Writable is the writable layer of a netbooted node's root, when no scratch disk takes it.
type Writable struct {
	// RAM bounds the root's writes (files written to /, /var and /tmp, which Rocky keeps on the
	// root): a tmpfs of this size, "N%" of the node's RAM or a size ("8G"). Default "50%".
	RAM string
}

// Disk is a local disk (or partition) the admin hands over to bootd on some nodes, and what for.
// A node takes the one disk that matches every selector given; a disk holding anything bootd did
// not make is left alone unless Wipe (and then only one named exactly: Serial, WWN or Path).
type Disk struct {
	Name   string   // the [disks.NAME] table's name: the mount point on the node, /run/bootd-disk/NAME
	Use    []string // DiskScratch (the root's writes and /tmp), DiskCache (root images kept across boots)
	Roles  []string // the nodes: every node of these roles...
	Nodes  []string // ...and these (a node rule wins over a role rule for the same use)
	Serial string   // udev's ID_SERIAL_SHORT or ID_SERIAL
	WWN    string   // udev's ID_WWN
	Model  string   // udev's ID_MODEL (spaces as _), * matching any run of characters
	Path   string   // a /dev/disk/by-* link: the disk or partition it names
	// MinSize and MaxSize bound the disk's size in bytes (0: no bound).
	MinSize, MaxSize int64
	Wipe             bool
}

// The uses of a handed-over disk: DiskScratch for the root's writes and /tmp; DiskCache for the
// node's image cache (the root image versions it booted, checked, kept across boots: an unchanged
// version is mounted from the disk with no root byte fetched, a new one costs only the chunks the
// versions held lack).
const (
	DiskScratch = "scratch"
	DiskCache   = "cache"
)

var diskUses = []string{DiskScratch, DiskCache}

// diskFields are the keys of a [disks.NAME] table.
var diskFields = map[string]func(d *Disk, v any) error{
	"use":      func(d *Disk, v any) (err error) { d.Use, err = asStrings(v); return err },
	"roles":    func(d *Disk, v any) (err error) { d.Roles, err = asStrings(v); return err },
	"nodes":    func(d *Disk, v any) (err error) { d.Nodes, err = asStrings(v); return err },
	"serial":   func(d *Disk, v any) (err error) { d.Serial, err = asString(v); return err },
	"wwn":      func(d *Disk, v any) (err error) { d.WWN, err = asString(v); return err },
	"model":    func(d *Disk, v any) (err error) { d.Model, err = asString(v); return err },
	"path":     func(d *Disk, v any) (err error) { d.Path, err = asString(v); return err },
	"min_size": func(d *Disk, v any) (err error) { d.MinSize, err = asSize(v); return err },
	"max_size": func(d *Disk, v any) (err error) { d.MaxSize, err = asSize(v); return err },
	"wipe":     func(d *Disk, v any) (err error) { d.Wipe, err = asBool(v); return err },
}

// setDisk stores key k (under [disks]) in c.
func (c *Config) setDisk(k toml.Key, v any) error {
	if len(k) < 3 {
		if _, ok := v.(map[string]any); !ok {
			return fmt.Errorf("want a table ([%s]), got %T", k, v)
		}
		if len(k) == 2 {
			c.disk(k[1])
		}
		return nil
	}
	set, ok := diskFields[k[2]]
	if len(k) > 3 || !ok {
		return fmt.Errorf("unknown key (known in [disks.NAME]: %s)", strings.Join(slices.Sorted(maps.Keys(diskFields)), ", "))
	}
	return set(c.disk(k[1]), v)
}

func (c *Config) disk(name string) *Disk {
	i := slices.IndexFunc(c.Disks, func(d Disk) bool { return d.Name == name })
	if i < 0 {
		c.Disks = append(c.Disks, Disk{Name: name})
		i = len(c.Disks) - 1
	}
	return &c.Disks[i]
}

// asSize reads "200G", "512M", "2T" or a number of bytes.
func asSize(v any) (int64, error) {
	if n, ok := v.(int64); ok && n >= 0 {
		return n, nil
	}
	s, err := asString(v)
	if err != nil {
		return 0, err
	}
	n, ok := parseSize(s)
	if !ok {
		return 0, fmt.Errorf("%q is not a size (want e.g. \"200G\", \"512M\", \"2T\")", s)
	}
	return n, nil
}

func parseSize(s string) (int64, bool) {
	mult := int64(1)
	if i := strings.IndexAny(s, "KMGT"); i > 0 && i == len(s)-1 {
		mult = map[byte]int64{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}[s[i]]
		s = s[:i]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, false
	}
	return n * mult, true
}

// diskValue is what a selector may hold: it travels on the kernel command line, where a space,
// a comma or a colon would end it.
func diskValue(s string) bool {
	return strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+*/@") == ""
}

// checkWritable wants "N%" (1-90) or a size.
func (c Config) checkWritable() error {
	r := c.Writable.RAM
	if p, ok := strings.CutSuffix(r, "%"); ok {
		if n, err := strconv.Atoi(p); err == nil && n >= 1 && n <= 90 {
			return nil
		}
	} else if n, ok := parseSize(r); ok && n >= 64<<20 {
		return nil
	}
	return c.err("writable.ram", "%q is not a share of RAM (\"1%%\" to \"90%%\") or a size of at least 64M (\"8G\")", r)
}

// checkDisks wants every rule to name its nodes, its disk and its use, with values the kernel
// command line can carry, and no two rules of the same kind giving one node the same use.
func (c Config) checkDisks() error {
	for _, d := range c.Disks {
		if err := c.checkDisk(d); err != nil {
			return err
		}
	}
	for i, a := range c.Disks {
		for _, b := range c.Disks[i+1:] {
			if clash := c.diskClash(a, b); clash != "" {
				return c.err(toml.Key{"disks", b.Name}.String(), "gives %s the same use as [disks.%s]: which disk would it take?", clash, a.Name)
			}
		}
	}
	return nil
}

func (c Config) checkDisk(d Disk) error {
	key := toml.Key{"disks", d.Name}.String()
	switch {
	case d.Name == "" || strings.Trim(d.Name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || len(d.Name) > 32:
		return c.err(key, "%q is not a rule name (lower-case letters, digits and -)", d.Name)
	case len(d.Use) == 0:
		return c.err(key, "no use (use = [%q]: the root's writes and /tmp; %q: the node's image cache)", DiskScratch, DiskCache)
	case len(d.Roles) == 0 && len(d.Nodes) == 0:
		return c.err(key, "names no nodes (roles = [\"compute\"] or nodes = [\"c3\"])")
	case d.Serial == "" && d.WWN == "" && d.Model == "" && d.Path == "" && d.MinSize == 0 && d.MaxSize == 0:
		return c.err(key, "names no disk: give serial, wwn, model, path, min_size or max_size (bootd takes only a disk the rule names)")
	case d.Wipe && d.Serial == "" && d.WWN == "" && d.Path == "":
		return c.err(key+".wipe", "wipe needs a disk named exactly (serial, wwn or path): a model or size could match a disk holding someone's data")
	case d.MaxSize != 0 && d.MinSize > d.MaxSize:
		return c.err(key+".max_size", "max_size is below min_size")
	case d.Path != "" && !strings.HasPrefix(d.Path, "/dev/disk/by-"):
		return c.err(key+".path", "%q is not a /dev/disk/by-* link (device names like /dev/sdb change from boot to boot)", d.Path)
	}
	for _, u := range d.Use {
		if !slices.Contains(diskUses, u) {
			return c.err(key+".use", "unknown use %q (known: %q, %q)", u, DiskScratch, DiskCache)
		}
	}
	for _, r := range d.Roles {
		if r != "master" && r != "compute" {
			return c.err(key+".roles", "unknown role %q (master, compute)", r)
		}
	}
	for _, n := range d.Nodes {
		if _, err := c.place(n); err != nil {
			return c.err(key+".nodes", "%q is no node name this configuration places", n)
		}
	}
	for k, v := range map[string]string{"serial": d.Serial, "wwn": d.WWN, "model": d.Model, "path": d.Path} {
		if !diskValue(v) {
			return c.err(key+"."+k, "%q holds a character the kernel command line cannot carry (letters, digits and . _ - + * / @ only; a model's spaces are _, as udev writes them)", v)
		}
	}
	return nil
}

// diskClash names a node (or role) to which rules a and b, of the same kind (both by role or
// both by node name), give a use in common; "" when none.
func (c Config) diskClash(a, b Disk) string {
	shared := false
	for _, u := range a.Use {
		shared = shared || slices.Contains(b.Use, u)
	}
	if !shared {
		return ""
	}
	for _, r := range a.Roles {
		if slices.Contains(b.Roles, r) {
			return "role " + r
		}
	}
	for _, n := range a.Nodes {
		if slices.Contains(b.Nodes, n) {
			return "node " + n
		}
	}
	return ""
}

// NodeKernelArgs are the arguments bootd adds to node name's kernel command line for its
// writable layer: rd.bootd.ram=, and one rd.bootd.disk=NAME:USES:KEY=VALUE,... per disk handed
// over to it (a rule naming the node wins over a rule for its role, use by use).
func (c Config) NodeKernelArgs(name, role string) []string {
	args := []string{"rd.bootd.ram=" + c.Writable.RAM}
	taken := map[string]bool{}
	for _, byNode := range []bool{true, false} {
		for _, d := range c.Disks {
			if byNode && !slices.Contains(d.Nodes, name) || !byNode && !slices.Contains(d.Roles, role) {
				continue
			}
			var uses []string
			for _, u := range d.Use {
				if !taken[u] {
					uses, taken[u] = append(uses, u), true
				}
			}
			if len(uses) > 0 {
				args = append(args, "rd.bootd.disk="+d.Name+":"+strings.Join(uses, "+")+":"+d.selectors())
			}
		}
	}
	return args
}

// selectors is the disk's match on the command line: KEY=VALUE pairs, comma-separated.
func (d Disk) selectors() string {
	var s []string
	add := func(k, v string) {
		if v != "" {
			s = append(s, k+"="+v)
		}
	}
	add("serial", d.Serial)
	add("wwn", d.WWN)
	add("model", d.Model)
	add("path", d.Path)
	if d.MinSize > 0 {
		add("minsize", strconv.FormatInt(d.MinSize, 10))
	}
	if d.MaxSize > 0 {
		add("maxsize", strconv.FormatInt(d.MaxSize, 10))
	}
	if d.Wipe {
		add("wipe", "1")
	}
	return strings.Join(s, ",")
}
