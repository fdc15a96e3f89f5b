package overlay

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/labcluster/gpucluster/internal/tomlpos"
)

// IndexFile is the index of templates inside the templates FS.
const IndexFile = "overlay.toml"

// ids are the fixed owners files may have: the image layers create munge and
// slurm with these ids before their packages could pick others.
var ids = map[string]int{"root": 0, "munge": 900, "slurm": 901}

// entry is one output file of the index.
type entry struct {
	Path     string
	Template string
	Arg      string // handed to the template as .Arg (e.g. a host key type)
	Mode     fs.FileMode
	UID, GID int
	Roles    []string
	Secret   bool
}

// rawEntry is an entry as written in overlay.toml.
type rawEntry struct {
	Path     string   `toml:"path"`
	Template string   `toml:"template"`
	Arg      string   `toml:"arg"`
	Mode     string   `toml:"mode"`
	Owner    string   `toml:"owner"`
	Group    string   `toml:"group"`
	Roles    []string `toml:"roles"`
	Secret   bool     `toml:"secret"`
}

// loadIndex reads and checks the index of templates.
func loadIndex(templates fs.FS) ([]entry, error) {
	data, err := fs.ReadFile(templates, IndexFile)
	if err != nil {
		return nil, fmt.Errorf("overlay index: %w", err)
	}
	var index struct {
		File []rawEntry `toml:"file"`
	}
	doc, err := tomlpos.Decode(IndexFile, string(data), &index)
	if err != nil {
		return nil, fmt.Errorf("overlay index: %w", err)
	}
	if keys := doc.Undecoded(); len(keys) > 0 {
		return nil, fmt.Errorf("overlay index %s: unknown key %s", IndexFile, keys[0])
	}
	entries := make([]entry, 0, len(index.File))
	for i, r := range index.File {
		e, err := r.check()
		if err != nil {
			return nil, fmt.Errorf("overlay index %s: file[%d] (%s): %w", IndexFile, i, r.Path, err)
		}
		entries = append(entries, e)
	}
	return entries, checkUnique(entries)
}

func (r rawEntry) check() (entry, error) {
	e := entry{Path: r.Path, Template: r.Template, Arg: r.Arg, Roles: r.Roles, Secret: r.Secret}
	if !path.IsAbs(r.Path) || path.Clean(r.Path) != r.Path {
		return e, errors.New("path must be absolute and clean")
	}
	if r.Template == "" || !fs.ValidPath(r.Template) {
		return e, fmt.Errorf("template %q is not a path inside overlays/", r.Template)
	}
	mode, err := parseMode(r.Mode)
	if err != nil {
		return e, err
	}
	e.Mode = mode
	if e.UID, err = lookupID(r.Owner, "owner"); err != nil {
		return e, err
	}
	if e.GID, err = lookupID(r.Group, "group"); err != nil {
		return e, err
	}
	if len(r.Roles) == 0 {
		return e, errors.New("roles is empty")
	}
	for _, role := range r.Roles {
		if role != "all" && role != RoleMaster && role != RoleCompute {
			return e, fmt.Errorf("unknown role %q (want master, compute or all)", role)
		}
	}
	if e.Secret && mode&0o077 != 0 {
		return e, fmt.Errorf("secret file with mode %04o: group and others must have no access", mode)
	}
	return e, nil
}

// parseMode reads an octal mode string; "" is 0644.
func parseMode(s string) (fs.FileMode, error) {
	if s == "" {
		return 0o644, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("mode %q is not an octal permission like \"0644\"", s)
	}
	return fs.FileMode(m), nil
}

// lookupID resolves one of the fixed owner names; "" is root.
func lookupID(name, what string) (int, error) {
	if name == "" {
		return 0, nil
	}
	id, ok := ids[name]
	if !ok {
		return 0, fmt.Errorf("unknown %s %q (known: root, munge, slurm)", what, name)
	}
	return id, nil
}

// checkUnique refuses two entries that would give one node the same path.
func checkUnique(entries []entry) error {
	for _, role := range []string{RoleMaster, RoleCompute} {
		seen := map[string]bool{}
		for _, e := range entries {
			if !e.appliesTo(role) {
				continue
			}
			if seen[e.Path] {
				return fmt.Errorf("overlay index %s: %s listed twice for role %s", IndexFile, e.Path, role)
			}
			seen[e.Path] = true
		}
	}
	return nil
}

func (e entry) appliesTo(role string) bool {
	return slices.Contains(e.Roles, "all") || slices.Contains(e.Roles, role)
}

// templateNames lists the template files an index refers to, sorted.
func templateNames(templates fs.FS) ([]string, error) {
	entries, err := loadIndex(templates)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Template)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// isTemplate says whether a file in the templates FS is a template (as
// opposed to the index or documentation).
func isTemplate(name string) bool { return strings.HasSuffix(name, ".tmpl") }
