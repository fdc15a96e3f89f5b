package testrepo

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Package is one stand-in RPM.
type Package struct {
	Name    string
	Version string // default 1.0
	Release string // default 1.el9
	Arch    string // default noarch

	Requires []string // dependency expressions, e.g. "bash" or "b >= 1.0"
	Provides []string

	// Files are regular files, path -> content; mode 0755 when the content
	// starts with "#!", 0644 otherwise (see Modes). Files under /etc are
	// %config(noreplace).
	Files   map[string]string
	Scripts struct {
		Post string // %post scriptlet, run by /bin/sh inside the root
	}
	// Units are systemd units the package ships as
	// /usr/lib/systemd/system/<unit>.service ("x.timer" etc. keep their
	// suffix), enough for systemctl --root to enable them.
	Units []string
	// Binaries are files copied from the host, path -> host file, mode
	// 0755. Paths naming the same host file become hard links, so the
	// payload carries the content once.
	Binaries map[string]string
	Symlinks map[string]string // path -> target
	// Dirs are directories the package owns, path -> mode.
	Dirs map[string]fs.FileMode
	// Modes overrides the mode of Files entries.
	Modes map[string]fs.FileMode
	// Payload, when set, is generated under PayloadDir (an absolute path the package then owns
	// with everything below it): a stand-in of realistic size (payload.go).
	Payload    *Payload
	PayloadDir string
}

// withDefaults fills the defaults and the unit files in.
func (p Package) withDefaults() Package {
	if p.Version == "" {
		p.Version = "1.0"
	}
	if p.Release == "" {
		p.Release = "1.el9"
	}
	if p.Arch == "" {
		p.Arch = "noarch"
	}
	files := make(map[string]string, len(p.Files)+len(p.Units))
	for k, v := range p.Files {
		files[k] = v
	}
	for _, u := range p.Units {
		files["/usr/lib/systemd/system/"+unitFile(u)] = unitContent(u)
	}
	p.Files = files
	return p
}

// FileName is the package's file name, as rpmbuild writes it.
func (p Package) FileName() string {
	p = p.withDefaults()
	return fmt.Sprintf("%s-%s-%s.%s.rpm", p.Name, p.Version, p.Release, p.Arch)
}

func unitFile(u string) string {
	if strings.Contains(u, ".") {
		return u
	}
	return u + ".service"
}

// unitContent is a unit that systemctl --root can enable; it never runs on
// a real machine (the test images have no systemd).
func unitContent(u string) string {
	name := strings.TrimSuffix(unitFile(u), ".service")
	return "[Unit]\nDescription=Stand-in for " + name + "\n\n" +
		"[Service]\nExecStart=/usr/bin/sleep infinity\n\n" +
		"[Install]\nWantedBy=multi-user.target\n"
}

func (p Package) check() error {
	if p.Name == "" || strings.ContainsAny(p.Name, " \t\n/%") {
		return fmt.Errorf("package name %q: empty or with a space, slash or %%", p.Name)
	}
	for _, v := range []string{p.Version, p.Release} {
		if strings.ContainsAny(v, "- \t\n%") {
			return fmt.Errorf("package %s: version or release %q: no dashes, spaces or %%", p.Name, v)
		}
	}
	for _, s := range append(p.Requires, p.Provides...) {
		if strings.ContainsAny(s, "\n%,") {
			return fmt.Errorf("package %s: dependency %q: no line breaks, commas or %%", p.Name, s)
		}
	}
	for _, ps := range p.paths() {
		if err := checkPath(ps); err != nil {
			return fmt.Errorf("package %s: %w", p.Name, err)
		}
	}
	return nil
}

func checkPath(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("path %q: want a clean absolute path", p)
	}
	if strings.ContainsAny(p, " \t\n\"%*?[]{}\\") {
		return fmt.Errorf("path %q: spaces, quotes, %% and glob characters are not supported", p)
	}
	return nil
}

// paths lists every path the package ships, sorted, each once.
func (p Package) paths() []string {
	seen := map[string]bool{}
	for k := range p.Files {
		seen[k] = true
	}
	for k := range p.Binaries {
		seen[k] = true
	}
	for k := range p.Symlinks {
		seen[k] = true
	}
	for k := range p.Dirs {
		seen[k] = true
	}
	if p.Payload != nil {
		seen[p.PayloadDir] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// spec is the package's spec file. %install copies a staging tree the Go
// side prepared (stage), so no file content passes through the spec.
func (p Package) spec(stage string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("%%global debug_package %%{nil}")
	w("%%global __os_install_post %%{nil}")
	w("%%global _build_id_links none")
	w("%%global _binaries_in_noarch_packages_terminate_build 0")
	w("Name: %s", p.Name)
	w("Version: %s", p.Version)
	w("Release: %s", p.Release)
	w("Summary: Stand-in for %s", p.Name)
	w("License: MIT")
	w("BuildArch: %s", p.Arch)
	// Only the dependencies the Package lists (and scriptlet interpreters):
	// rpmbuild's automatic ones would depend on the host's files.
	w("AutoReqProv: no")
	for _, r := range p.Requires {
		w("Requires: %s", r)
	}
	for _, r := range p.Provides {
		w("Provides: %s", r)
	}
	w("\n%%description\nStand-in for %s, built for tests.\n", p.Name)
	// The staging tree is used once: moved, not copied (a payload is gigabytes).
	w("%%install\nmkdir -p %%{buildroot}\nfind %s -mindepth 1 -maxdepth 1 -exec mv -t %%{buildroot} {} +\n", stage)
	if p.Scripts.Post != "" {
		w("%%post\n%s\n", strings.TrimRight(p.Scripts.Post, "\n"))
	}
	w("%%files\n%%defattr(-,root,root,-)")
	for _, ps := range p.paths() {
		w("%s", p.filesLine(ps))
	}
	return b.String()
}

func (p Package) filesLine(ps string) string {
	switch {
	case hasKey(p.Dirs, ps):
		return fmt.Sprintf("%%dir %%attr(%04o,root,root) %s", modeBits(p.Dirs[ps]), ps)
	case hasKey(p.Symlinks, ps):
		return ps
	case hasKey(p.Binaries, ps):
		return fmt.Sprintf("%%attr(0755,root,root) %s", ps)
	case p.Payload != nil && ps == p.PayloadDir:
		return ps // the directory and everything below it, modes as generated
	}
	line := fmt.Sprintf("%%attr(%04o,root,root) %s", modeBits(p.fileMode(ps)), ps)
	if strings.HasPrefix(ps, "/etc/") {
		line = "%config(noreplace) " + line
	}
	return line
}

// modeBits turns an fs.FileMode into the octal digits %attr wants,
// including setuid, setgid and sticky.
func modeBits(m fs.FileMode) uint32 {
	bits := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	return bits
}

func (p Package) fileMode(ps string) fs.FileMode {
	if m, ok := p.Modes[ps]; ok {
		return m
	}
	if strings.HasPrefix(p.Files[ps], "#!") {
		return 0o755
	}
	return 0o644
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}
