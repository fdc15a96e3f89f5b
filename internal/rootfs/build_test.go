package rootfs

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/labcluster/gpucluster/internal/spec"
)

// fakeInstall "installs" an RPM by copying its content (a file tree in a directory) into root,
// and records what it installed: rootfs is tested here, the real rpm in internal/rpmcmd.
type fakeInstall struct{ calls []string }

func (f *fakeInstall) install(ctx context.Context, root string, rpms []string) error {
	for _, r := range rpms {
		f.calls = append(f.calls, filepath.Base(r))
		if out, err := exec.CommandContext(ctx, "cp", "-a", r+"/.", root).CombinedOutput(); err != nil {
			return errors.New(string(out))
		}
	}
	return nil
}

// fakeRPM is a directory standing in for a package: its files, copied into the image.
func fakeRPM(t *testing.T, name string, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	for p, content := range files {
		writeTestFile(t, filepath.Join(dir, p), content)
	}
	return dir
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

// busyboxRPM gives the image a shell (static busybox) so commands can run in it.
func busyboxRPM(t *testing.T) string {
	t.Helper()
	dir := fakeRPM(t, "bash", map[string]string{"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n", "etc/group": "root:x:0:\n"})
	if out, err := exec.Command("install", "-D", "/bin/busybox", filepath.Join(dir, "bin/busybox")).CombinedOutput(); err != nil {
		t.Fatal(string(out))
	}
	if err := os.Symlink("busybox", filepath.Join(dir, "bin/sh")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func testLayers(t *testing.T) (base, top *spec.Layer, baseRPMs, topRPMs []string) {
	base = &spec.Layer{Name: "base", Digest: "d-base"}
	top = &spec.Layer{
		Name: "munge", Digest: "d-munge",
		Groups: []spec.Group{{Name: "munge", GID: 900}},
		Users:  []spec.User{{Name: "munge", UID: 900, GID: 900, Home: "/var/lib/munge", Shell: "/sbin/nologin"}},
		Files:  []spec.File{{Path: "/etc/munge/README", Content: "key comes from bootd\n", Mode: 0o400, Owner: "munge", Group: "munge"}},
		Run:    []spec.Command{{Command: "echo ran > /var/lib/munge/marker", Description: "marker"}},
	}
	return base, top, []string{busyboxRPM(t)}, []string{fakeRPM(t, "munge", map[string]string{"var/lib/munge/.keep": ""})}
}

func newBuilder(t *testing.T, f *fakeInstall) *Builder {
	log := logrus.New()
	log.SetOutput(io.Discard)
	return &Builder{CacheDir: t.TempDir(), Install: f.install, Epoch: 1700000000, Log: log}
}

// mergedTree builds steps and mounts their merged view until t ends.
func mergedTree(t *testing.T, b *Builder, steps []Step) (string, []Result, error) {
	t.Helper()
	res, err := b.Build(context.Background(), steps)
	if err != nil {
		return "", res, err
	}
	m, err := b.Mount(res, t.TempDir())
	if err != nil {
		return "", res, err
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Error(err)
		}
	})
	return m.Dir, res, nil
}

func TestBuildAppliesLayers(t *testing.T) {
	requireRoot(t)
	base, top, baseRPMs, topRPMs := testLayers(t)
	f := &fakeInstall{}
	b := newBuilder(t, f)
	dst, _, err := mergedTree(t, b, []Step{{Layer: base, RPMs: baseRPMs}, {Layer: top, RPMs: topRPMs}})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct{ name, path, want string }{
		{"group with fixed gid", "etc/group", "munge:x:900:"},
		{"user with fixed uid", "etc/passwd", "munge:x:900:900::/var/lib/munge:/sbin/nologin"},
		{"file content", "etc/munge/README", "key comes from bootd"},
		{"command ran inside the image", "var/lib/munge/marker", "ran"},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dst, c.path))
			if err != nil || !strings.Contains(string(b), c.want) {
				t.Fatalf("%s = %q, %v; want it to contain %q", c.path, b, err, c.want)
			}
		})
	}
	st, err := os.Stat(filepath.Join(dst, "etc/munge/README"))
	if err != nil || st.Mode().Perm() != 0o400 || st.Sys().(*syscall.Stat_t).Uid != 900 {
		t.Fatalf("README mode %v owner %v, want 0400 owned by 900", st.Mode(), st.Sys().(*syscall.Stat_t).Uid)
	}
	if entries, _ := os.ReadDir(filepath.Join(dst, "dev")); len(entries) != 0 {
		t.Errorf("device nodes left in the image's /dev: %v", entries)
	}
}

// TestBuildIgnoresUmask: a build under umask 027 gives the tree a build under 022 gives, mode
// for mode: the tree's root, a layer file's parent directory, what a command creates.
func TestBuildIgnoresUmask(t *testing.T) {
	requireRoot(t)
	base, top, baseRPMs, topRPMs := testLayers(t)
	top.Run = append(top.Run, spec.Command{Command: "mkdir -p /var/lib/munge/state", Description: "a directory"})
	modes := func(umask int) map[string]fs.FileMode {
		t.Helper()
		defer syscall.Umask(syscall.Umask(umask))
		dst, _, err := mergedTree(t, newBuilder(t, &fakeInstall{}), []Step{{Layer: base, RPMs: baseRPMs}, {Layer: top, RPMs: topRPMs}})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]fs.FileMode{}
		err = filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			out[strings.TrimPrefix(p, dst)] = fi.Mode()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want, got := modes(0o022), modes(0o027)
	for _, p := range slices.Sorted(maps.Keys(want)) {
		if got[p] != want[p] {
			t.Errorf("%q: mode %v under umask 027, %v under 022", p, got[p], want[p])
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d paths under umask 027, %d under 022", len(got), len(want))
	}
}

func TestLayerCache(t *testing.T) {
	requireRoot(t)
	base, top, baseRPMs, topRPMs := testLayers(t)
	f := &fakeInstall{}
	b := newBuilder(t, f)
	build := func() []Result {
		t.Helper()
		res, err := b.Build(context.Background(), []Step{{Layer: base, RPMs: baseRPMs, RPMDigests: []string{"a"}}, {Layer: top, RPMs: topRPMs, RPMDigests: []string{"b"}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	cached := func(res []Result) []bool { return []bool{res[0].Cached, res[1].Cached} }
	if got := cached(build()); got[0] || got[1] {
		t.Fatalf("first build cached %v, want nothing cached", got)
	}
	if got := cached(build()); !got[0] || !got[1] {
		t.Fatalf("second build cached %v, want both layers cached", got)
	}
	top.Digest = "d-munge-edited"
	if got := cached(build()); !got[0] || got[1] {
		t.Fatalf("after editing the top layer cached %v, want base cached and munge rebuilt", got)
	}
	base.Digest = "d-base-edited"
	if got := cached(build()); got[0] || got[1] {
		t.Fatalf("after editing base cached %v, want both rebuilt", got)
	}
	b.Epoch++ // rpm's install times and the commands' SOURCE_DATE_EPOCH differ
	if got := cached(build()); got[0] || got[1] {
		t.Fatalf("after changing the epoch cached %v, want both rebuilt", got)
	}
}

// TestLayerKeyGolden pins what a layer's key covers, and how: a change here must come with a new
// keyFormat, or trees an older builder left in the cache would be taken for this one's.
func TestLayerKeyGolden(t *testing.T) {
	st := Step{Layer: &spec.Layer{Name: "base", Digest: "d-base"}, RPMDigests: []string{"a", "b"}}
	const want = "1446f281d56112cf555663ca7b724fbcd1735b5555f47e36740b5c053999af2c"
	if key := (&Builder{Epoch: 1700000000}).layerKey("p-key", st); key != want {
		t.Errorf("layer key %s, want %s: bump keyFormat if the change is deliberate, then update this", key, want)
	}
}

func TestFailedLayerLeavesNoCacheEntry(t *testing.T) {
	requireRoot(t)
	base, top, baseRPMs, topRPMs := testLayers(t)
	top.Run = []spec.Command{{Command: "exit 3", Description: "fails"}}
	b := newBuilder(t, &fakeInstall{})
	_, err := b.Build(context.Background(), []Step{{Layer: base, RPMs: baseRPMs}, {Layer: top, RPMs: topRPMs}})
	if err == nil || !strings.Contains(err.Error(), `layer munge: run[0] "exit 3"`) {
		t.Fatalf("err = %v, want the failing command named", err)
	}
	entries, _ := os.ReadDir(filepath.Join(b.CacheDir, "layers"))
	if len(entries) != 1 {
		t.Fatalf("cache holds %d entries, want only the finished base layer", len(entries))
	}
}

func TestFileOutsideTreeRefused(t *testing.T) {
	tree := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(tree, "etc")); err != nil {
		t.Fatal(err)
	}
	err := writeFiles(tree, []spec.File{{Path: "/etc/evil", Content: "x", Mode: 0o644}})
	if err == nil || !strings.Contains(err.Error(), "leaves the image") {
		t.Fatalf("err = %v, want a refusal to write through a symlink out of the image", err)
	}
}

// TestFileSourceOutsideLayersRefused: a source that became a symlink out of the layers
// directory after the layer loaded is not copied into the image.
func TestFileSourceOutsideLayersRefused(t *testing.T) {
	layers, tree := t.TempDir(), t.TempDir()
	if err := os.Symlink("/etc/passwd", filepath.Join(layers, "conf")); err != nil {
		t.Fatal(err)
	}
	f := spec.File{Path: "/etc/conf", Source: "conf", LayersDir: layers, Mode: 0o644}
	err := writeFiles(tree, []spec.File{f})
	if err == nil || !strings.Contains(err.Error(), "escapes") {
		t.Fatalf("err = %v, want a refusal to read through a symlink out of the layers directory", err)
	}
	if _, err := os.Lstat(filepath.Join(tree, "etc/conf")); err == nil {
		t.Error("the host file was written into the image")
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("rootfs tests need root (chroot, mounts, chown); run them as root as CI does")
	}
}

func TestCleanStaleUnmountsWhatAKilledBuildLeft(t *testing.T) {
	requireRoot(t)
	cache := t.TempDir()
	dir := filepath.Join(cache, "layers")
	writeTestFile(t, filepath.Join(dir, ".build-base-1", "tree", "etc", "motd"), "hello")
	proc := filepath.Join(dir, ".build-base-1", "tree", "proc")
	if err := os.MkdirAll(proc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("proc", proc, "proc", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(proc, unix.MNT_DETACH) })
	stages, err := Stages(cache)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 1 {
		t.Fatalf("stages %v, want the one left", stages)
	}
	freed, err := CleanStale(stages[0])
	if err != nil {
		t.Fatal(err)
	}
	if freed != 5 {
		t.Errorf("freed %d bytes, want 5 (the stage's file, not /proc's)", freed)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left %v", entries)
	}
	points, _ := mountPoints()
	for _, p := range points {
		if strings.HasPrefix(p, dir) {
			t.Fatalf("%s still mounted", p)
		}
	}
}

// TestRemoveAllGivesUpOnLastingErrors: removeAll tries again only while a directory is found not
// empty (a dying build's last writes); an error that time does not cure (here a read-only file
// system) returns at once, not after its 2 s of retries, on every build that meets it.
func TestRemoveAllGivesUpOnLastingErrors(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "stale", "file"), "x")
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := removeAll(filepath.Join(dir, "stale"))
	if !errors.Is(err, unix.EROFS) {
		t.Fatalf("removeAll on a read-only file system = %v, want EROFS", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("removeAll took %s to give up on EROFS, want no retries", took)
	}
}
