package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// leftovers are removed outright: each is state of one particular build
// (random seeds, secrets, locks, caches, backups) that would make two builds
// of the same lock differ, or that every node would wrongly share. Globs use
// path.Match syntax in the last element only.
var leftovers = []string{
	"var/lib/systemd/random-seed",
	// A host credential secret made during the build would be shared by every node.
	"var/lib/systemd/credential.secret",
	// Host keys are per node (they come from the node's overlay); sshd-keygen
	// makes fresh ones at boot when these are absent.
	"etc/ssh/ssh_host_*",
	// ldconfig's aux-cache records inode numbers and ctimes; it only speeds
	// up the next ldconfig run. /etc/ld.so.cache itself is kept: ld.so needs
	// it to find libraries in ld.so.conf.d directories (CUDA), and ldconfig
	// writes it sorted, from the libraries alone.
	"var/cache/ldconfig/aux-cache",
	"var/lib/dnf/history*",
	"var/lib/dnf/repos",
	"root/.cache",
	"etc/passwd-", "etc/shadow-", "etc/group-", "etc/gshadow-",
	"etc/subuid-", "etc/subgid-",
	// Berkeley DB environment files and the lock of the rpm database; the
	// database itself (rpmdb.sqlite) stays. Rocky 9 keeps it in /var/lib/rpm,
	// newer rpm in /usr/lib/sysimage/rpm.
	"var/lib/rpm/.rpm.lock", "var/lib/rpm/__db.*",
	"usr/lib/sysimage/rpm/.rpm.lock", "usr/lib/sysimage/rpm/__db.*",
}

// emptied keep the directory (its owner and mode, e.g. 1777 for /tmp, are
// part of the image) and lose everything in it.
var emptied = []string{"tmp", "var/tmp", "var/cache/dnf"}

// logDir has its regular files truncated rather than removed: packages and
// tmpfiles.d expect files such as wtmp (root:utmp 0664) and lastlog to exist
// with their owners and modes, and /var/log/README is a packaged symlink.
const logDir = "var/log"

// Normalize is the one pass that makes a built tree reproducible. It empties
// /etc/machine-id (systemd generates an id at boot), removes the leftovers
// above, empties /tmp, /var/tmp and /var/cache/dnf, truncates the files under
// /var/log, removes *.pyc files written during the build, rewrites extended
// attributes in sorted order and clamps every atime and mtime newer than epoch
// to epoch, walking the tree in sorted order without following symlinks.
//
// Paths inside the tree are resolved with os.Root, so a symlink in the image
// (/tmp -> /host/tmp, or any absolute link) can never make Normalize touch
// the build host: such a link is an error instead.
func Normalize(tree string, epoch int64) error {
	root, err := os.OpenRoot(tree)
	if err != nil {
		return fmt.Errorf("normalize: %w", err)
	}
	defer root.Close()
	steps := []func(*os.Root) error{emptyMachineID, removeLeftovers, emptyDirs, truncateLogs}
	for _, step := range steps {
		if err := step(root); err != nil {
			return fmt.Errorf("normalize %s: %w", tree, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(tree, &st); err != nil {
		return fmt.Errorf("normalize: %w", &fs.PathError{Op: "stat", Path: tree, Err: err})
	}
	n := normalizer{epoch: epoch, dev: st.Dev}
	if err := n.walk(filepath.Clean(tree)); err != nil {
		return fmt.Errorf("normalize: %w", err)
	}
	return nil
}

// emptyMachineID keeps /etc/machine-id as an empty file: systemd then
// generates a fresh id at every boot instead of all nodes sharing the
// builder's, and a read-only root still has a file to bind-mount it over.
func emptyMachineID(root *os.Root) error {
	const name = "etc/machine-id"
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("/%s: not a regular file (%s)", name, fi.Mode().Type())
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

func removeLeftovers(root *os.Root) error {
	for _, pattern := range leftovers {
		names, err := glob(root, pattern)
		if err != nil {
			return err
		}
		for _, name := range names {
			if err := root.RemoveAll(name); err != nil {
				return err
			}
		}
	}
	return nil
}

// glob expands a wildcard in the last element of pattern; a missing
// directory matches nothing.
func glob(root *os.Root, pattern string) ([]string, error) {
	dir, base := path.Split(pattern)
	dir = path.Clean(dir)
	if !strings.ContainsAny(base, "*?[") {
		return []string{pattern}, nil
	}
	entries, err := fs.ReadDir(root.FS(), dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if ok, _ := path.Match(base, e.Name()); ok {
			names = append(names, path.Join(dir, e.Name()))
		}
	}
	return names, nil
}

func emptyDirs(root *os.Root) error {
	for _, dir := range emptied {
		entries, err := fs.ReadDir(root.FS(), dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := root.RemoveAll(path.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func truncateLogs(root *os.Root) error {
	if _, err := root.Lstat(logDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return fs.WalkDir(root.FS(), logDir, func(name string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		return f.Close()
	})
}

// normalizer does the per-entry work of the final walk.
type normalizer struct {
	epoch int64
	dev   uint64 // the tree's device
}

// walk visits dir's entries in name order, then dir itself: a directory's
// times are clamped only after everything below it is done, because removing
// a *.pyc changes its parent's mtime. Symlinks are never followed: only real
// directories are descended into and every call uses the l* variant. A
// directory on another device (a /proc or /dev still mounted from the build)
// is an error: its content is the host's, not the image's.
func (n normalizer) walk(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if st.Dev != n.dev {
		return fmt.Errorf("%s: a mount point inside the tree (unmount it first)", dir)
	}
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if e.IsDir() {
			err = n.walk(p)
		} else {
			err = n.entry(p)
		}
		if err != nil {
			return err
		}
	}
	return n.fix(dir)
}

// entry removes a *.pyc written during the build or fixes anything else.
func (n normalizer) entry(p string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	if n.buildPyc(p, &st) {
		return os.Remove(p)
	}
	return n.fixStat(p, &st)
}

// buildPyc reports whether p is Python bytecode written during the build.
// Packaged *.pyc files carry the package's build time, before the lock's
// epoch, and stay: they are valid for their sources, whose packaged mtimes
// the clamp keeps. Newer ones came from running Python in the image; marshal
// output is not reproducible and Python rewrites or ignores a missing cache,
// so removing them costs only a compile at first import.
func (n normalizer) buildPyc(p string, st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && strings.HasSuffix(p, ".pyc") && n.newer(st.Mtim)
}

func (n normalizer) fix(p string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	return n.fixStat(p, &st)
}

func (n normalizer) fixStat(p string, st *unix.Stat_t) error {
	if err := sortXattrs(p); err != nil {
		return err
	}
	return n.clamp(p, st)
}

// clamp sets atime and mtime to epoch where they are newer, keeping older
// times: packaged files keep the mtime rpm gave them, which *.pyc files and
// other mtime-keyed caches were built against. Setting every time to epoch
// would make each packaged *.pyc stale and recompiled on every node.
func (n normalizer) clamp(p string, st *unix.Stat_t) error {
	at, mt := n.min(st.Atim), n.min(st.Mtim)
	if at == st.Atim && mt == st.Mtim {
		return nil
	}
	ts := []unix.Timespec{at, mt}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "lutimes", Path: p, Err: err}
	}
	return nil
}

func (n normalizer) min(t unix.Timespec) unix.Timespec {
	if n.newer(t) {
		return unix.Timespec{Sec: n.epoch}
	}
	return t
}

func (n normalizer) newer(t unix.Timespec) bool {
	return t.Sec > n.epoch || t.Sec == n.epoch && t.Nsec > 0
}

// sortXattrs rewrites p's extended attributes in name order. mksquashfs
// stores them in the order listxattr returns, which on ext4 depends on the
// order they were set; removing all and setting them again in sorted order
// makes that order a function of the attributes alone. Files with fewer than
// two attributes (nearly all) are left alone.
func sortXattrs(p string) error {
	names, err := listXattrs(p)
	if err != nil || len(names) < 2 {
		return err
	}
	values := make([][]byte, len(names))
	for i, name := range names {
		if values[i], err = getXattr(p, name); err != nil {
			return err
		}
	}
	for _, name := range names {
		if err := unix.Lremovexattr(p, name); err != nil {
			return &fs.PathError{Op: "lremovexattr " + name, Path: p, Err: err}
		}
	}
	order := sortedIndex(names)
	for _, i := range order {
		if err := unix.Lsetxattr(p, names[i], values[i], 0); err != nil {
			return &fs.PathError{Op: "lsetxattr " + names[i], Path: p, Err: err}
		}
	}
	return nil
}

func sortedIndex(names []string) []int {
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	return order
}

func listXattrs(p string) ([]string, error) {
	buf, err := readSized(func(b []byte) (int, error) { return unix.Llistxattr(p, b) })
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, &fs.PathError{Op: "llistxattr", Path: p, Err: err}
	}
	var names []string
	for name := range strings.SplitSeq(string(buf), "\x00") {
		if name != "" {
			names = append(names, name)
		}
	}
	return names, nil
}

func getXattr(p, name string) ([]byte, error) {
	v, err := readSized(func(b []byte) (int, error) { return unix.Lgetxattr(p, name, b) })
	if err != nil {
		return nil, &fs.PathError{Op: "lgetxattr " + name, Path: p, Err: err}
	}
	return v, nil
}

// readSized calls a size-then-fill syscall, retrying when the value grows
// between the two calls.
func readSized(call func([]byte) (int, error)) ([]byte, error) {
	for {
		n, err := call(nil)
		if err != nil || n == 0 {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = call(buf)
		if errors.Is(err, syscall.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}
