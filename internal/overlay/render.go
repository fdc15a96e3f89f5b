package overlay

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"text/template"
)

// ErrUnknownNode is returned when the node to render is not in the cluster.
var ErrUnknownNode = errors.New("node not in the cluster")

// view is what every template sees.
type view struct {
	Cluster  Cluster
	Slurm    SlurmOptions // Cluster.Slurm with defaults filled in
	Node     Node         // the node being rendered
	Master   Node
	Nodes    []Node // master first, then computes in natural order (c2 before c10)
	Computes []Node
	Arg      string // the index entry's arg
}

// Render returns the files of node, sorted by path.
func Render(templates fs.FS, c Cluster, node string) ([]File, error) {
	entries, err := loadIndex(templates)
	if err != nil {
		return nil, err
	}
	v, err := newView(c, node)
	if err != nil {
		return nil, err
	}
	var files []File
	for _, e := range entries {
		if !e.appliesTo(v.Node.Role) {
			continue
		}
		f, err := renderOne(templates, e, v)
		if err != nil {
			return nil, fmt.Errorf("overlay for %s: %s: %w", node, e.Path, err)
		}
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

func renderOne(templates fs.FS, e entry, v view) (File, error) {
	src, err := fs.ReadFile(templates, e.Template)
	if err != nil {
		return File{}, fmt.Errorf("template: %w", err)
	}
	v.Arg = e.Arg
	t, err := template.New(e.Template).Option("missingkey=error").Funcs(funcs(v)).Parse(string(src))
	if err != nil {
		return File{}, fmt.Errorf("template: %w", err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, v); err != nil {
		return File{}, fmt.Errorf("template: %w", err)
	}
	return File{Path: e.Path, Mode: e.Mode, UID: e.UID, GID: e.GID, Data: buf.Bytes(), Secret: e.Secret}, nil
}

func newView(c Cluster, name string) (view, error) {
	if err := checkCluster(c); err != nil {
		return view{}, err
	}
	v := view{Cluster: c, Slurm: withDefaults(c.Slurm)}
	nodes := slices.Clone(c.Nodes)
	slices.SortFunc(nodes, compareNodes)
	found := false
	for _, n := range nodes {
		if n.Name == name {
			v.Node, found = n, true
		}
		if n.Role == RoleMaster {
			v.Master = n
		} else {
			v.Computes = append(v.Computes, n)
		}
	}
	if !found {
		return view{}, fmt.Errorf("overlay: %s: %w", name, ErrUnknownNode)
	}
	v.Nodes = nodes
	return v, nil
}

// checkCluster refuses what would render broken files: no single master,
// duplicate names or addresses, addresses outside the subnet.
func checkCluster(c Cluster) error {
	masters := 0
	names, addrs := map[string]bool{}, map[string]bool{}
	for _, n := range c.Nodes {
		if err := checkNode(c, n); err != nil {
			return fmt.Errorf("overlay: node %q: %w", n.Name, err)
		}
		if names[n.Name] || addrs[n.Address.String()] {
			return fmt.Errorf("overlay: node %q: name or address %s used twice", n.Name, n.Address)
		}
		names[n.Name], addrs[n.Address.String()] = true, true
		if n.Role == RoleMaster {
			masters++
		}
	}
	if masters != 1 {
		return fmt.Errorf("overlay: cluster has %d masters, want 1", masters)
	}
	if err := checkNTPServers(c.NTPServers); err != nil {
		return err
	}
	return checkUsers(c.Users)
}

// checkUsers keeps each user to its one line of /etc/bootd/users (NAME:UID:COMMENT:SHELL) and each
// key to its one line of /etc/bootd/authorized_keys: bootd's config refuses worse with file:line
// (config.checkUsers); this guards the templates, whoever fills them.
func checkUsers(users []User) error {
	bad := func(s string) bool {
		return strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == ':' || r == 0x7f })
	}
	// bootd-node also puts a name into paths (/home/NAME) and grep and sed patterns.
	badName := func(s string) bool {
		return s == "" || s[0] == '-' || strings.ContainsFunc(s, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-')
		})
	}
	for _, u := range users {
		if badName(u.Name) || bad(u.Comment) || bad(u.Shell) || u.UID <= 0 {
			return fmt.Errorf("overlay: user %q does not fit one line of /etc/bootd/users", u.Name)
		}
		for _, k := range u.SSHKeys {
			if strings.ContainsAny(k, "\n\r") {
				return fmt.Errorf("overlay: user %s: an SSH key with a line break", u.Name)
			}
		}
	}
	return nil
}

// checkNTPServers keeps each upstream time source to one word: it is the NAME of a
// "pool NAME iburst" line, where a blank, newline or # would add options, directives or a
// comment to the master's chrony.conf. bootd's config already refuses such names with their
// file:line (config.checkNTPServers); this guards the template itself, whoever fills it.
func checkNTPServers(servers []string) error {
	for i, s := range servers {
		if s == "" || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == '#' || r == 0x7f }) {
			return fmt.Errorf("overlay: ntp server %d %q is not one host name or address", i+1, s)
		}
	}
	return nil
}

func checkNode(c Cluster, n Node) error {
	switch {
	case n.Role != RoleMaster && n.Role != RoleCompute:
		return fmt.Errorf("unknown role %q", n.Role)
	case !n.Address.IsValid() || !c.Subnet.Contains(n.Address):
		return fmt.Errorf("address %v is not in subnet %v", n.Address, c.Subnet)
	case n.Hardware != nil:
		return checkHardware(*n.Hardware)
	}
	return nil
}

// checkHardware keeps reported values from breaking the line they go into:
// GPU types and files end up inside slurmd's --conf and gres.conf.
func checkHardware(h Hardware) error {
	for _, g := range h.GPUs {
		if g.Type == "" || strings.ContainsAny(g.Type, " \t\n\":=,#") {
			return fmt.Errorf("gpu type %q is not one word", g.Type)
		}
		if !strings.HasPrefix(g.File, "/dev/") || strings.ContainsAny(g.File, " \t\n\"#") {
			return fmt.Errorf("gpu file %q is not a /dev path", g.File)
		}
	}
	return nil
}

func withDefaults(o SlurmOptions) SlurmOptions {
	d := DefaultSlurmOptions
	o.ProctrackType = cmp.Or(o.ProctrackType, d.ProctrackType)
	o.TaskPlugin = cmp.Or(o.TaskPlugin, d.TaskPlugin)
	o.MaxNodeCount = cmp.Or(o.MaxNodeCount, d.MaxNodeCount)
	o.SuspendTimeout = cmp.Or(o.SuspendTimeout, d.SuspendTimeout)
	o.ResumeTimeout = cmp.Or(o.ResumeTimeout, d.ResumeTimeout)
	return o
}

// compareNodes orders the master first, then names naturally: c2 before c10.
func compareNodes(a, b Node) int {
	if (a.Role == RoleMaster) != (b.Role == RoleMaster) {
		if a.Role == RoleMaster {
			return -1
		}
		return 1
	}
	pa, na := splitNumber(a.Name)
	pb, nb := splitNumber(b.Name)
	return cmp.Or(strings.Compare(pa, pb), cmp.Compare(na, nb), strings.Compare(a.Name, b.Name))
}

// splitNumber splits "c12" into "c" and 12; a name without a trailing number
// gives -1.
func splitNumber(name string) (string, int) {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	n, err := strconv.Atoi(name[i:])
	if err != nil {
		return name, -1
	}
	return name[:i], n
}
