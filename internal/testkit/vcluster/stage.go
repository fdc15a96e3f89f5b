package vcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// File is one file (or, with fs.ModeDir in Mode, one directory) of a node, at its absolute
// path on the node.
type File struct {
	Path     string
	Mode     fs.FileMode
	UID, GID int
	Data     []byte
}

// Account is a user and its primary group as the node's image creates them (fixed ids, from
// the layers), written into the node's /etc/passwd and /etc/group.
type Account struct {
	Name     string
	UID, GID int
	Home     string
}

// packageDirs are the directories the image's packages and their systemd units provide for
// the daemons, owned by the named account, created on every node before the node's own files
// (which win when they name the same path).
var packageDirs = []struct {
	path    string
	mode    fs.FileMode
	account string // "" is root
}{
	{"/etc/munge", 0o700, "munge"},
	{"/var/lib/munge", 0o711, "munge"},
	{"/var/log/munge", 0o700, "munge"},
	{"/run/munge", 0o755, "munge"},
	{"/etc/slurm", 0o755, ""},
	{"/var/log/slurm", 0o755, "slurm"},
	{"/var/spool/slurmctld", 0o755, "slurm"},
	{"/var/spool/slurmd", 0o755, ""},
	// chronyd's state and its command socket, fresh per node like every /var and /run path.
	{"/var/lib/chrony", 0o750, chronyUser},
	{"/run/chrony", 0o750, chronyUser},
}

// chronyUser is the account the host's chronyd drops to, built into it (Debian: _chrony; Rocky's
// package names it chrony): the directories chronyd writes must belong to it.
const chronyUser = "_chrony"

// lateRoots are mounted as fresh tmpfs on every node; files under them are written by the
// node's init after mounting.
var lateRoots = []string{"/run", "/tmp"}

// refusedRoots can never hold a node's files.
var refusedRoots = []string{"/proc", "/sys", "/dev"}

// stage lays out a node's overlay upper layers under dir and returns what its init must mount
// and write. hostRoot is the lower layer ("/" except in tests); binds are the node's NFS
// stand-in mounts (see share.go), whose mount points stage creates.
func stage(hostRoot, dir, hostname string, accounts []Account, files []File, binds []bindMount) (*initSpec, error) {
	tmpdirs, err := tmpfilesConf(files)
	if err != nil {
		return nil, err
	}
	st := &stager{hostRoot: hostRoot, upper: filepath.Join(dir, "upper"),
		spec: &initSpec{Hostname: hostname, Tmpfs: lateRoots, Binds: binds}}
	points, err := st.mountPoints()
	if err != nil {
		return nil, err
	}
	paths := make([]string, 0, len(files)+len(tmpdirs))
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	for _, d := range tmpdirs {
		paths = append(paths, d.Path)
	}
	if err := st.overlays(dir, paths, points); err != nil {
		return nil, err
	}
	if err := st.fill(accounts, files, tmpdirs, points); err != nil {
		return nil, err
	}
	return st.spec, nil
}

// fill writes the node's layer, in the order its boot would: the image's accounts, mount
// points and package directories, then the node's files, then what tmpfiles.d creates.
func (st *stager) fill(accounts []Account, files []File, tmpdirs []tmpfilesDir, points []string) error {
	ids, groups, err := st.accounts(accounts)
	if err != nil {
		return err
	}
	for _, p := range points {
		if err := st.write(File{Path: p, Mode: fs.ModeDir | 0o755}); err != nil {
			return err
		}
	}
	if err := st.packageDirs(ids); err != nil {
		return err
	}
	for _, f := range files {
		if err := st.put(f); err != nil {
			return err
		}
	}
	for _, d := range tmpdirs {
		f, err := d.file(ids, groups)
		if err != nil {
			return err
		}
		if err := st.put(f); err != nil {
			return err
		}
	}
	return nil
}

// overlays prepares an upper and a work directory for /etc, /var, the root of every path the
// node's own layer holds (paths init writes later need none) and of every mount point, and adds
// their overlay mounts to the spec.
func (st *stager) overlays(dir string, paths, points []string) error {
	roots := map[string]bool{"/etc": true, "/var": true}
	staged := slices.Clone(points)
	for _, p := range paths {
		if !st.deferred(p) {
			staged = append(staged, p)
		}
	}
	for _, p := range staged {
		r, err := rootOf(p)
		if err != nil {
			return err
		}
		roots[r] = true
	}
	for _, r := range slices.Sorted(maps.Keys(roots)) {
		fi, err := os.Stat(filepath.Join(st.hostRoot, r))
		if err != nil || !fi.IsDir() {
			return fmt.Errorf("node %s: files under %s, which is no directory on this host", st.spec.Hostname, r)
		}
		up, work := filepath.Join(dir, "upper", r), filepath.Join(dir, "work", r)
		if rel, err := filepath.Rel(r, dir); err == nil && !strings.HasPrefix(rel, "..") {
			return fmt.Errorf("node %s: work directory %s lies under the overlaid %s", st.spec.Hostname, dir, r)
		}
		for _, d := range []string{up, work} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		if err := copyOwner(up, fi); err != nil {
			return err
		}
		st.spec.Overlays = append(st.spec.Overlays, overlayMount{Target: r, Upper: up, Work: work})
	}
	return nil
}

// mountPoints checks the binds' targets and returns the ones stage must create in an upper
// layer: a top-level target (/home) is the host's own directory, hidden in the node only.
func (st *stager) mountPoints() ([]string, error) {
	var points []string
	for i, b := range st.spec.Binds {
		t := path.Clean(b.Target)
		if !path.IsAbs(t) || t == "/" || !filepath.IsAbs(b.Source) {
			return nil, fmt.Errorf("bind %s on %s: want absolute paths below /", b.Source, b.Target)
		}
		// A mount point inside another bind would have to be made in the other's source.
		for _, o := range st.spec.Binds[:i] {
			if ot := path.Clean(o.Target); t == ot || strings.HasPrefix(t, ot+"/") || strings.HasPrefix(ot, t+"/") {
				return nil, fmt.Errorf("bind on %s: overlaps the bind on %s", t, ot)
			}
		}
		if strings.Count(t, "/") == 1 && !isLate(t) && !slices.Contains(refusedRoots, t) {
			if fi, err := os.Stat(filepath.Join(st.hostRoot, t)); err != nil || !fi.IsDir() {
				return nil, fmt.Errorf("bind on %s: no such directory on this host", t)
			}
			continue
		}
		r, err := rootOf(t)
		if err != nil {
			return nil, err
		}
		if isLate(r) {
			return nil, fmt.Errorf("bind on %s: %s is a fresh tmpfs, mounted after the binds", t, r)
		}
		points = append(points, t)
	}
	return points, nil
}

// packageDirs creates the directories the image's packages provide for its daemons.
func (st *stager) packageDirs(ids map[string][2]int) error {
	for _, d := range packageDirs {
		f := File{Path: d.path, Mode: fs.ModeDir | d.mode}
		if d.account != "" {
			id, ok := ids[d.account]
			if !ok {
				continue // the image has no such daemon
			}
			f.UID, f.GID = id[0], id[1]
		}
		if err := st.put(f); err != nil {
			return err
		}
	}
	return nil
}

type stager struct {
	hostRoot, upper string
	spec            *initSpec
}

// put writes a file into the upper layer of its root, or defers it to init for the tmpfs roots
// and the bind mounts, which exist only once init has mounted them.
func (st *stager) put(f File) error {
	f.Path = path.Clean(f.Path)
	if st.deferred(f.Path) {
		st.spec.Late = append(st.spec.Late, f)
		return nil
	}
	if _, err := rootOf(f.Path); err != nil {
		return err
	}
	return st.write(f)
}

// write writes a file into the upper layer of its root.
func (st *stager) write(f File) error {
	if err := st.parents(path.Dir(f.Path)); err != nil {
		return err
	}
	if err := writeFile(st.upper, f); err != nil {
		return fmt.Errorf("stage %s: %w", f.Path, err)
	}
	return nil
}

// deferred reports whether p lies on a tmpfs root or on a bind mount (its target included).
func (st *stager) deferred(p string) bool {
	p = path.Clean(p)
	if r, err := rootOf(p); err == nil && isLate(r) {
		return true
	}
	for _, b := range st.spec.Binds {
		t := path.Clean(b.Target)
		if p == t || strings.HasPrefix(p, t+"/") {
			return true
		}
	}
	return false
}

// parents creates the missing parent directories of a file in the upper layer with the mode
// and owner of the host's directory of the same path, so the overlay shows them unchanged.
func (st *stager) parents(dir string) error {
	if dir == "/" {
		return nil
	}
	up := filepath.Join(st.upper, dir)
	if _, err := os.Lstat(up); err == nil {
		return nil
	}
	if err := st.parents(path.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(up, 0o755); err != nil {
		return err
	}
	if hs, err := os.Stat(filepath.Join(st.hostRoot, dir)); err == nil && hs.IsDir() {
		if err := os.Chmod(up, hs.Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetgid)); err != nil {
			return err
		}
		return copyOwner(up, hs)
	}
	return nil
}

// accounts writes the host's /etc/passwd and /etc/group with the image's accounts replacing
// any entry of the same name or id, and returns every user's uid and gid and every group's gid
// by name.
func (st *stager) accounts(accounts []Account) (map[string][2]int, map[string]int, error) {
	passwd, err := os.ReadFile(filepath.Join(st.hostRoot, "etc/passwd"))
	if err != nil {
		return nil, nil, err
	}
	group, err := os.ReadFile(filepath.Join(st.hostRoot, "etc/group"))
	if err != nil {
		return nil, nil, err
	}
	if len(accounts) > 0 {
		passwd, group = mergeAccounts(passwd, group, accounts)
		for _, f := range []File{
			{Path: "/etc/passwd", Mode: 0o644, Data: passwd},
			{Path: "/etc/group", Mode: 0o644, Data: group},
		} {
			if err := st.put(f); err != nil {
				return nil, nil, err
			}
		}
	}
	ids := map[string][2]int{}
	for _, f := range idLines(passwd, 4) {
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err1 == nil && err2 == nil {
			ids[f[0]] = [2]int{uid, gid}
		}
	}
	groups := map[string]int{}
	for _, f := range idLines(group, 3) {
		if gid, err := strconv.Atoi(f[2]); err == nil {
			groups[f[0]] = gid
		}
	}
	return ids, groups, nil
}

// idLines splits passwd or group lines at ':', keeping those with at least n fields.
func idLines(data []byte, n int) [][]string {
	var out [][]string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Split(line, ":"); len(f) >= n {
			out = append(out, f)
		}
	}
	return out
}

// mergeAccounts replaces (or adds) the accounts in passwd and group files.
func mergeAccounts(passwd, group []byte, accounts []Account) ([]byte, []byte) {
	keep := func(data []byte, clash func(name, id string) bool) []string {
		var out []string
		for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
			f := strings.Split(line, ":")
			if len(f) >= 3 && clash(f[0], f[2]) {
				continue
			}
			out = append(out, line)
		}
		return out
	}
	pw := keep(passwd, func(name, id string) bool {
		for _, a := range accounts {
			if name == a.Name || id == strconv.Itoa(a.UID) {
				return true
			}
		}
		return false
	})
	gr := keep(group, func(name, id string) bool {
		for _, a := range accounts {
			if name == a.Name || id == strconv.Itoa(a.GID) {
				return true
			}
		}
		return false
	})
	for _, a := range accounts {
		home := a.Home
		if home == "" {
			home = "/"
		}
		pw = append(pw, fmt.Sprintf("%s:x:%d:%d:%s:%s:/usr/sbin/nologin", a.Name, a.UID, a.GID, a.Name, home))
		gr = append(gr, fmt.Sprintf("%s:x:%d:", a.Name, a.GID))
	}
	return []byte(strings.Join(pw, "\n") + "\n"), []byte(strings.Join(gr, "\n") + "\n")
}

// rootOf returns the top-level directory of an absolute path, refusing the ones a node's
// files cannot go under.
func rootOf(p string) (string, error) {
	if !path.IsAbs(p) || path.Clean(p) == "/" {
		return "", fmt.Errorf("file path %q: want an absolute path below /", p)
	}
	parts := strings.SplitN(strings.TrimPrefix(path.Clean(p), "/"), "/", 2)
	r := "/" + parts[0]
	for _, bad := range refusedRoots {
		if r == bad {
			return "", fmt.Errorf("file path %q: %s cannot hold a node's files", p, bad)
		}
	}
	if len(parts) == 1 && !isLate(r) {
		return "", fmt.Errorf("file path %q: a node's files live below a top-level directory", p)
	}
	return r, nil
}

func isLate(root string) bool {
	for _, l := range lateRoots {
		if root == l {
			return true
		}
	}
	return false
}

func copyOwner(p string, fi fs.FileInfo) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if err := os.Lchown(p, int(st.Uid), int(st.Gid)); err != nil && !errors.Is(err, fs.ErrPermission) {
			return err
		}
	}
	return nil
}
