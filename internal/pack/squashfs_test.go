package pack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const testEpoch = 1700000000

// fileTime is the mtime every test entry gets: before the epoch, like a
// packaged file, so it must survive packing unchanged.
var fileTime = time.Unix(testEpoch-3600, 0)

// capNetRaw is a VFS_CAP_REVISION_2 security.capability value granting
// cap_net_raw+ep, as rpm sets on Rocky's /usr/bin/ping.
var capNetRaw = []byte{0x01, 0, 0, 0x02, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// buildTree makes the test image: every kind of entry the real one has.
func buildTree(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root: owners and device nodes, as CI has")
	}
	tree := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	dir := func(p string, mode os.FileMode) {
		must(os.MkdirAll(filepath.Join(tree, p), 0o755))
		must(os.Chmod(filepath.Join(tree, p), mode))
	}
	file := func(p, content string, mode os.FileMode) {
		must(os.MkdirAll(filepath.Dir(filepath.Join(tree, p)), 0o755))
		must(os.WriteFile(filepath.Join(tree, p), []byte(content), 0o600))
		must(os.Chmod(filepath.Join(tree, p), mode))
	}
	dir("etc", 0o755)
	dir("tmp", 0o777|os.ModeSticky)
	dir("var/lib/munge", 0o700)
	file("etc/passwd", "root:x:0:0:root:/root:/bin/bash\n", 0o644)
	file("etc/shadow", "root:!::0:99999:7:::\n", 0)
	file("etc/munge/munge.key", strings.Repeat("k", 1024), 0o400)
	file("usr/bin/tool", strings.Repeat("binary\x00", 50000), 0o755)
	file("usr/bin/su", "setuid", 0o755|os.ModeSetuid)
	file("usr/bin/ping", "ping", 0o755)
	must(unix.Lsetxattr(filepath.Join(tree, "usr/bin/ping"), "security.capability", capNetRaw, 0))
	must(unix.Lsetxattr(filepath.Join(tree, "etc/passwd"), "user.note", []byte("kept"), 0))
	must(os.Link(filepath.Join(tree, "usr/bin/tool"), filepath.Join(tree, "usr/bin/tool-hardlink")))
	must(os.Symlink("usr/bin", filepath.Join(tree, "bin")))
	must(os.Symlink("/usr/share/zoneinfo/UTC", filepath.Join(tree, "etc/localtime")))
	dir("dev", 0o755)
	must(unix.Mknod(filepath.Join(tree, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(unix.Mknod(filepath.Join(tree, "dev/loop0"), unix.S_IFBLK|0o660, int(unix.Mkdev(7, 0))))
	must(unix.Mkfifo(filepath.Join(tree, "dev/initctl"), 0o600))
	must(os.Chmod(filepath.Join(tree, "dev/null"), 0o666)) // mknod applied the umask
	must(os.Chmod(filepath.Join(tree, "dev/loop0"), 0o660))
	for _, p := range []string{"etc/munge", "etc/munge/munge.key", "var/lib/munge"} {
		must(os.Lchown(filepath.Join(tree, p), 983, 983))
	}
	must(os.Lchown(filepath.Join(tree, "dev/loop0"), 0, 6))
	setTimes(t, tree, fileTime)
	return tree
}

// setTimes sets every time in tree to at, links included: the state
// rootfs.Normalize leaves.
func setTimes(t testing.TB, tree string, at time.Time) {
	t.Helper()
	ts := unix.NsecToTimespec(at.UnixNano())
	err := filepath.WalkDir(tree, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func pack(t testing.TB, tree string, opts SquashOptions) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "rootfs.squashfs")
	if opts.Epoch == 0 {
		opts.Epoch = testEpoch
	}
	if err := Squashfs(context.Background(), tree, out, opts); err != nil {
		t.Fatal(err)
	}
	return out
}

// entry is one line of unsquashfs -lln.
type entry struct{ mode, owner, size, target string }

func longList(t *testing.T, image string) map[string]entry {
	t.Helper()
	out, err := exec.Command("unsquashfs", "-lln", "-d", "", image).Output()
	if err != nil {
		t.Fatal(err)
	}
	list := map[string]entry{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		// mode owner size... date time path [-> target]; devices print "maj, min".
		i := slices.IndexFunc(f, func(s string) bool { return len(s) == 5 && s[2] == ':' })
		if i < 0 {
			continue
		}
		e := entry{mode: f[0], owner: f[1], size: strings.Join(f[2:i-1], " ")}
		rest := f[i+1:]
		p := "/"
		if len(rest) > 0 {
			p = rest[0]
		}
		if len(rest) == 3 && rest[1] == "->" {
			e.target = rest[2]
		}
		list[p] = e
	}
	return list
}

func TestSquashfsKeepsMetadata(t *testing.T) {
	image := pack(t, buildTree(t), SquashOptions{})
	list := longList(t, image)
	for _, tc := range []struct {
		path string
		want entry
	}{
		{"/", entry{mode: "drwxr-xr-x", owner: "0/0"}},
		{"/tmp", entry{mode: "drwxrwxrwt", owner: "0/0"}},
		{"/etc/shadow", entry{mode: "----------", owner: "0/0"}},
		{"/etc/munge", entry{mode: "drwxr-xr-x", owner: "983/983"}},
		{"/etc/munge/munge.key", entry{mode: "-r--------", owner: "983/983", size: "1024"}},
		{"/var/lib/munge", entry{mode: "drwx------", owner: "983/983"}},
		{"/usr/bin/tool", entry{mode: "-rwxr-xr-x", owner: "0/0", size: "350000"}},
		{"/usr/bin/tool-hardlink", entry{mode: "-rwxr-xr-x", owner: "0/0", size: "350000"}},
		{"/usr/bin/su", entry{mode: "-rwsr-xr-x", owner: "0/0"}},
		{"/bin", entry{mode: "lrwxrwxrwx", owner: "0/0", target: "usr/bin"}},
		{"/etc/localtime", entry{mode: "lrwxrwxrwx", owner: "0/0", target: "/usr/share/zoneinfo/UTC"}},
		{"/dev/null", entry{mode: "crw-rw-rw-", owner: "0/0", size: "1, 3"}},
		{"/dev/loop0", entry{mode: "brw-rw----", owner: "0/6", size: "7, 0"}},
		{"/dev/initctl", entry{mode: "prw-------", owner: "0/0"}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			got, ok := list[tc.path]
			if !ok {
				t.Fatalf("missing from the image")
			}
			if tc.want.size == "" && tc.want.target == "" {
				got.size = ""
			}
			if tc.want.target != "" {
				got.size = ""
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestSquashfsExtracted checks what -lln does not show: hard links, xattrs,
// file times kept as they are, and the superblock time.
func TestSquashfsExtracted(t *testing.T) {
	image := pack(t, buildTree(t), SquashOptions{})
	dir := filepath.Join(t.TempDir(), "x")
	if out, err := exec.Command("unsquashfs", "-no-progress", "-d", dir, image).CombinedOutput(); err != nil {
		t.Fatalf("unsquashfs: %v\n%s", err, out)
	}
	a, b := lstat(t, filepath.Join(dir, "usr/bin/tool")), lstat(t, filepath.Join(dir, "usr/bin/tool-hardlink"))
	if !os.SameFile(a, b) {
		t.Error("hard link became two files")
	}
	if !a.ModTime().Equal(fileTime) {
		t.Errorf("mtime %v, want the tree's %v", a.ModTime(), fileTime)
	}
	for _, x := range []struct{ path, name, want string }{
		{"usr/bin/ping", "security.capability", string(capNetRaw)},
		{"etc/passwd", "user.note", "kept"},
	} {
		buf := make([]byte, 64)
		n, err := unix.Lgetxattr(filepath.Join(dir, x.path), x.name, buf)
		if err != nil || string(buf[:n]) != x.want {
			t.Errorf("%s %s = %q, %v; want %q", x.path, x.name, buf[:max(n, 0)], err, x.want)
		}
	}
	out, err := exec.Command("unsquashfs", "-mkfs-time", image).Output()
	if err != nil || strings.TrimSpace(string(out)) != "1700000000" {
		t.Errorf("mkfs time %q (%v), want %d", out, err, testEpoch)
	}
}

func TestSquashfsReproducible(t *testing.T) {
	tree := buildTree(t)
	copied := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", tree, copied).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	if os.SameFile(lstat(t, filepath.Join(tree, "etc/passwd")), lstat(t, filepath.Join(copied, "etc/passwd"))) {
		t.Fatal("copy shares inodes")
	}
	want := digest(t, pack(t, tree, SquashOptions{}))
	for _, tc := range []struct {
		name string
		tree string
		opts SquashOptions
		env  string
	}{
		{"same tree again", tree, SquashOptions{}, ""},
		{"copied tree, other inodes", copied, SquashOptions{}, ""},
		{"one processor", tree, SquashOptions{Processors: 1}, ""},
		{"four processors", copied, SquashOptions{Processors: 4}, ""},
		{"with progress", tree, SquashOptions{Progress: func(string) {}}, ""},
		{"SOURCE_DATE_EPOCH in the environment", tree, SquashOptions{}, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("SOURCE_DATE_EPOCH", tc.env)
			}
			if got := digest(t, pack(t, tc.tree, tc.opts)); got != want {
				t.Errorf("sha256 %s, want %s", got, want)
			}
		})
	}
}

func TestSquashfsRefuses(t *testing.T) {
	tree := buildTree(t)
	for _, tc := range []struct {
		name    string
		opts    SquashOptions
		prepare func(t *testing.T)
		want    string
	}{
		{"unknown compressor", SquashOptions{Epoch: testEpoch, Compression: "brotli"}, nil, `no "brotli" compressor`},
		{"epoch beyond 32 bits", SquashOptions{Epoch: 1 << 32}, nil, "32-bit"},
		{"negative epoch", SquashOptions{Epoch: -1}, nil, "32-bit"},
		{"level for a compressor without levels", SquashOptions{Epoch: testEpoch, Compression: "xz", Level: 5}, nil, "Unrecognised compressor option -Xcompression-level"},
		{"zstd level out of range", SquashOptions{Epoch: testEpoch, Level: 23}, nil, "compression-level"},
		{"tree not normalized", SquashOptions{Epoch: testEpoch}, func(t *testing.T) {
			now := time.Now()
			if err := os.Chtimes(filepath.Join(tree, "etc/passwd"), now, now); err != nil {
				t.Fatal(err)
			}
		}, "etc/passwd: mtime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.prepare != nil {
				tc.prepare(t)
			}
			out := filepath.Join(t.TempDir(), "out")
			err := Squashfs(context.Background(), tree, out, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Error("output left behind")
			}
		})
	}
}

func TestSquashfsCompression(t *testing.T) {
	tree := buildTree(t)
	for _, tc := range []struct {
		comp  string
		level int
		want  string
	}{{"", 0, "zstd"}, {"zstd", 19, "zstd"}, {"xz", 0, "xz"}, {"gzip", 1, "gzip"}} {
		t.Run(fmt.Sprint(tc.want, tc.level), func(t *testing.T) {
			image := pack(t, tree, SquashOptions{Compression: tc.comp, Level: tc.level})
			out, err := exec.Command("unsquashfs", "-s", image).Output()
			if err != nil || !strings.Contains(string(out), "Compression "+tc.want) {
				t.Errorf("unsquashfs -s: %v\n%s", err, out)
			}
		})
	}
}

// readProgress reports each new percentage of mksquashfs's bar (output as 4.5.1 writes it, with
// a tree's \r redraws), and returns what is not the bar.
func TestReadProgress(t *testing.T) {
	tests := []struct {
		name, out  string
		want       []string
		other, end string
	}{
		{"bar", "\r[==|      ] 2/20  10%\r[==/      ] 3/20  10%\r[=========] 20/20 100%\n", []string{"2/20 10%", "20/20 100%"}, "\n", "100%"},
		{"no bar drawn (a small tree, seen under load)", "\n", nil, "\n", ""},
		{"an error line", "FATAL ERROR: no space\n", nil, "FATAL ERROR: no space\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			other, last := readProgress(strings.NewReader(tc.out), func(s string) { got = append(got, s) })
			if !slices.Equal(got, tc.want) || other != tc.other || last != tc.end {
				t.Errorf("reports %q, other %q, last %q; want %q, %q, %q", got, other, last, tc.want, tc.other, tc.end)
			}
		})
	}
}

func TestSquashfsProgressAndList(t *testing.T) {
	tree := buildTree(t)
	var reports []string
	image := pack(t, tree, SquashOptions{Progress: func(s string) { reports = append(reports, s) }})
	if len(reports) == 0 || !strings.HasSuffix(reports[len(reports)-1], " 100%") {
		t.Errorf("progress reports %q, want the last to be 100%%", reports)
	}
	got := listSquashfs(t, image)
	var want []string
	err := filepath.WalkDir(tree, func(p string, _ fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(tree, p)
		want = append(want, filepath.Join("/", rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("unsquashfs -l:\n%s\nwant (tree walk order):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// listSquashfs lists every path in the squashfs image at path, "/" first,
// as unsquashfs -l prints them (sorted per directory).
func listSquashfs(t *testing.T, path string) []string {
	t.Helper()
	out, err := exec.Command("unsquashfs", "-l", "-d", "", path).Output()
	if err != nil {
		t.Fatalf("list %s: unsquashfs: %v", path, exitDetail(err))
	}
	var paths []string
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			paths = append(paths, "/")
		} else if strings.HasPrefix(line, "/") {
			paths = append(paths, line)
		}
	}
	return paths
}

func digest(t testing.TB, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func lstat(t testing.TB, p string) fs.FileInfo {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}
