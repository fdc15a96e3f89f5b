package rootfs

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const testEpoch = 1700000000

// old is before testEpoch: a packaged file's mtime, which Normalize keeps.
var old = time.Unix(testEpoch-86400, 0)

// buildTree writes a small image-like tree; each entry is a path and its
// content, with a trailing "/" for a directory and "->" for a symlink.
func buildTree(t *testing.T, entries []string) string {
	t.Helper()
	tree := t.TempDir()
	for _, e := range entries {
		p := filepath.Join(tree, strings.SplitN(e, "->", 2)[0])
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.Contains(e, "->"):
			err = os.Symlink(strings.SplitN(e, "->", 2)[1], p)
		case strings.HasSuffix(e, "/"):
			err = os.MkdirAll(p, 0o755)
		default:
			err = os.WriteFile(p, []byte("content of "+e), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return tree
}

var imageTree = []string{
	"etc/machine-id",
	"etc/passwd", "etc/passwd-", "etc/shadow-", "etc/group-", "etc/gshadow-",
	"etc/ssh/sshd_config", "etc/ssh/ssh_host_ed25519_key", "etc/ssh/ssh_host_ed25519_key.pub",
	"etc/localtime->/usr/share/zoneinfo/UTC",
	"etc/ld.so.cache",
	"hostetc->/etc",
	"root/.cache/pip/http/x", "root/.bashrc",
	"tmp/a", "tmp/.X11-unix/", "var/tmp/b/c",
	"var/cache/dnf/baseos-1234/repodata/repomd.xml", "var/cache/ldconfig/aux-cache",
	"var/log/dnf.log", "var/log/chrony/", "var/log/README->../../usr/share/doc/README.logs",
	"var/lib/dnf/history.sqlite", "var/lib/dnf/history.sqlite-shm", "var/lib/dnf/repos/baseos/x",
	"var/lib/dnf/groups.json",
	"var/lib/rpm/.rpm.lock", "var/lib/rpm/__db.001", "var/lib/rpm/rpmdb.sqlite",
	"var/lib/systemd/random-seed",
	"usr/lib/python3.9/__pycache__/packaged.cpython-39.pyc",
	"usr/lib/python3.9/__pycache__/built.cpython-39.pyc",
	"usr/lib/python3.9/os.py",
	"usr/bin/old",
}

func TestNormalize(t *testing.T) {
	tree := buildTree(t, imageTree)
	setOld(t, tree, "usr/lib/python3.9/__pycache__/packaged.cpython-39.pyc", "usr/lib/python3.9/os.py", "usr/bin/old")
	if err := unix.Mkfifo(filepath.Join(tree, "run-fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(tree, "tmp"), 0o1777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	hostEtc := lstat(t, "/etc")
	if err := Normalize(tree, testEpoch); err != nil {
		t.Fatal(err)
	}
	// Times first: reading a file below would move its atime again.
	checkTimes(t, tree)
	if got := lstat(t, "/etc"); got.ModTime() != hostEtc.ModTime() {
		t.Errorf("host /etc mtime changed through a symlink: %v -> %v", hostEtc.ModTime(), got.ModTime())
	}
	if got := lstat(t, filepath.Join(tree, "usr/bin/old")).ModTime(); !got.Equal(old) {
		t.Errorf("usr/bin/old mtime = %v, want the older %v kept", got, old)
	}
	for _, tc := range []struct {
		path string
		want string // gone, kept, empty (zero-length file), emptydir, link
	}{
		{"etc/machine-id", "empty"},
		{"etc/passwd", "kept"},
		{"etc/passwd-", "gone"}, {"etc/shadow-", "gone"}, {"etc/group-", "gone"}, {"etc/gshadow-", "gone"},
		{"etc/ssh/sshd_config", "kept"},
		{"etc/ssh/ssh_host_ed25519_key", "gone"}, {"etc/ssh/ssh_host_ed25519_key.pub", "gone"},
		{"etc/localtime", "link"}, {"hostetc", "link"},
		{"etc/ld.so.cache", "kept"},
		{"root/.cache", "gone"}, {"root/.bashrc", "kept"},
		{"tmp", "emptydir"}, {"var/tmp", "emptydir"}, {"var/cache/dnf", "emptydir"},
		{"var/cache/ldconfig/aux-cache", "gone"},
		{"var/log/dnf.log", "empty"}, {"var/log/chrony", "emptydir"}, {"var/log/README", "link"},
		{"var/lib/dnf/history.sqlite", "gone"}, {"var/lib/dnf/history.sqlite-shm", "gone"},
		{"var/lib/dnf/repos", "gone"}, {"var/lib/dnf/groups.json", "kept"},
		{"var/lib/rpm/.rpm.lock", "gone"}, {"var/lib/rpm/__db.001", "gone"}, {"var/lib/rpm/rpmdb.sqlite", "kept"},
		{"var/lib/systemd/random-seed", "gone"},
		{"usr/lib/python3.9/__pycache__/packaged.cpython-39.pyc", "kept"},
		{"usr/lib/python3.9/__pycache__/built.cpython-39.pyc", "gone"},
	} {
		t.Run(tc.path, func(t *testing.T) { checkEntry(t, filepath.Join(tree, tc.path), tc.want) })
	}
	if fi := lstat(t, filepath.Join(tree, "tmp")); fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("/tmp lost its sticky bit: %v", fi.Mode())
	}
}

func checkEntry(t *testing.T, p, want string) {
	fi, err := os.Lstat(p)
	if want == "gone" {
		if err == nil {
			t.Errorf("still there (%v)", fi.Mode())
		}
		return
	}
	if err != nil {
		t.Fatalf("want %s: %v", want, err)
	}
	switch want {
	case "empty":
		if !fi.Mode().IsRegular() || fi.Size() != 0 {
			t.Errorf("want an empty file, have %v size %d", fi.Mode(), fi.Size())
		}
	case "kept":
		if fi.Size() == 0 {
			t.Errorf("content lost")
		}
	case "link":
		if fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("want a symlink, have %v", fi.Mode())
		}
	case "emptydir":
		if entries, err := os.ReadDir(p); err != nil || len(entries) != 0 {
			t.Errorf("want an empty directory, have %d entries (%v)", len(entries), err)
		}
	}
}

// checkTimes asserts that no atime or mtime in tree is newer than testEpoch.
func checkTimes(t *testing.T, tree string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Atim.Nano() > testEpoch*1e9 || st.Mtim.Nano() > testEpoch*1e9 {
			t.Errorf("%s: atime %d mtime %d newer than epoch %d", p, st.Atim.Sec, st.Mtim.Sec, testEpoch)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("walked only %d entries", n)
	}
}

// TestNormalizeStaysInTree: links out of the tree are never followed, and a
// link on a path Normalize cleans is an error rather than a cleaned host dir.
func TestNormalizeStaysInTree(t *testing.T) {
	outside := t.TempDir()
	sentinel := filepath.Join(outside, "keep")
	if err := os.WriteFile(sentinel, []byte("host file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(sentinel, time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	before := lstat(t, sentinel)
	for _, tc := range []struct {
		name    string
		link    string // a symlink in the tree pointing at outside
		wantErr bool
	}{
		{"link elsewhere is left alone", "opt/host", false},
		{"absolute /tmp", "tmp", true},
		{"absolute /var/log", "var/log", true},
		{"absolute /var/cache/dnf", "var/cache/dnf", true},
		{"absolute parent of a leftover", "var/lib/rpm", true},
		{"absolute /etc", "etc", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := buildTree(t, []string{tc.link + "->" + outside})
			err := Normalize(tree, testEpoch)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.link) {
				t.Errorf("error %q does not name %s", err, tc.link)
			}
			after, err := os.Lstat(sentinel)
			if err != nil {
				t.Fatalf("host file removed: %v", err)
			}
			if !after.ModTime().Equal(before.ModTime()) || after.Size() != before.Size() {
				t.Errorf("host file touched: %v %d -> %v %d", before.ModTime(), before.Size(), after.ModTime(), after.Size())
			}
		})
	}
}

// TestNormalizeSortsXattrs: the same attributes set in two orders end up
// listed in the same order, which is the order mksquashfs stores.
func TestNormalizeSortsXattrs(t *testing.T) {
	var lists [2][]string
	for i, order := range [][]string{{"user.b", "user.a", "user.c"}, {"user.c", "user.a", "user.b"}} {
		tree := buildTree(t, []string{"f"})
		p := filepath.Join(tree, "f")
		for _, name := range order {
			if err := unix.Lsetxattr(p, name, []byte("v-"+name), 0); err != nil {
				t.Skipf("no user xattrs here: %v", err)
			}
		}
		if err := Normalize(tree, testEpoch); err != nil {
			t.Fatal(err)
		}
		names, err := listXattrs(p)
		if err != nil {
			t.Fatal(err)
		}
		lists[i] = names
		if v, _ := getXattr(p, "user.a"); string(v) != "v-user.a" {
			t.Errorf("user.a = %q after rewrite", v)
		}
	}
	if strings.Join(lists[0], ",") != strings.Join(lists[1], ",") || len(lists[0]) != 3 {
		t.Errorf("xattr orders differ: %v vs %v", lists[0], lists[1])
	}
}

func TestNormalizeMachineIDNotRegular(t *testing.T) {
	tree := buildTree(t, []string{"etc/machine-id->../var/lib/dbus/machine-id", "var/lib/dbus/machine-id"})
	err := Normalize(tree, testEpoch)
	if err == nil || !strings.Contains(err.Error(), "etc/machine-id") {
		t.Fatalf("err = %v, want one naming etc/machine-id", err)
	}
}

func setOld(t *testing.T, tree string, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := os.Chtimes(filepath.Join(tree, name), old, old); err != nil {
			t.Fatal(err)
		}
	}
}

func lstat(t *testing.T, p string) fs.FileInfo {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// TestNormalizeRefusesMountPoint: a /proc or /dev left mounted by the build
// holds the host's files, which must neither be touched nor end up packed.
func TestNormalizeRefusesMountPoint(t *testing.T) {
	requireRoot(t)
	tree := buildTree(t, []string{"proc/", "etc/passwd"})
	mnt := filepath.Join(tree, "proc")
	if err := unix.Mount("normalize-test", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	defer unix.Unmount(mnt, 0)
	err := Normalize(tree, testEpoch)
	if err == nil || !strings.Contains(err.Error(), mnt+": a mount point") {
		t.Fatalf("err = %v, want one naming %s as a mount point", err, mnt)
	}
}
