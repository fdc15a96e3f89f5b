//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/imgbuild"
	"github.com/labcluster/gpucluster/internal/sha256hex"
	"github.com/labcluster/gpucluster/internal/testkit/sandboxtest"
	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
)

// imgLab is a copy of the project's layers and images with a stand-in repository for every
// package they name, and a site file pointing every repository there: dnf and rpm run for real.
type imgLab struct {
	dir, repo, site string
	log             *logrus.Logger
}

func newImgLab(ctx context.Context, t *testing.T) *imgLab {
	t.Helper()
	testrepo.NeedTools(t, "dnf", "modifyrepo_c", "mksquashfs", "unsquashfs", "cpio")
	dir := artifactDir(t)
	l := &imgLab{dir: dir, log: logrus.New()}
	l.log.SetLevel(logrus.WarnLevel)
	start := time.Now()
	site, err := testrepo.StandInTree(ctx, "..", dir, "master", "compute", "compute-legacy")
	if err != nil {
		t.Fatal(err)
	}
	l.repo, l.site = site.Repo, site.Path
	t.Logf("stand-in repository: %d packages for the %d the layers name, built in %s", site.Packages, len(site.Names), time.Since(start).Round(time.Second))
	return l
}

func (l *imgLab) image(name string) string { return filepath.Join(l.dir, "images", name+".toml") }

func (l *imgLab) opts(out, cache, version string) imgbuild.Options {
	return imgbuild.Options{SitePath: l.site, OutDir: filepath.Join(l.dir, out), CacheDir: filepath.Join(l.dir, cache), Version: version, Log: l.log}
}

func (l *imgLab) lock(ctx context.Context, t *testing.T, image string) {
	t.Helper()
	start := time.Now()
	if _, _, err := imgbuild.Lock(ctx, l.image(image), l.opts("out", "cache", "")); err != nil {
		t.Fatal(err)
	}
	t.Logf("lock %s: %s", image, time.Since(start).Round(100*time.Millisecond))
}

func (l *imgLab) build(ctx context.Context, t *testing.T, image, out, cache, version string) *imgbuild.Report {
	t.Helper()
	r, err := imgbuild.Build(ctx, l.image(image), l.opts(out, cache, version))
	if err != nil {
		t.Fatal(err)
	}
	var layers []string
	for _, x := range r.Layers {
		layers = append(layers, fmt.Sprintf("%s:%v:%s", x.Layer, map[bool]string{true: "cached", false: "built"}[x.Cached], x.Duration.Round(10*time.Millisecond)))
	}
	t.Logf("build %s/%s into %s: %s (download %s, pack %s); %s", image, version, out, r.Total.Round(100*time.Millisecond), r.Fetch.Round(10*time.Millisecond), r.Pack.Round(10*time.Millisecond), strings.Join(layers, " "))
	return r
}

// TestImgbuild locks and builds both images with the real dnf and rpm, checks what they
// contain, builds compute again from scratch for byte identity, edits a layer to check the
// cache, and feeds it bad input.
func TestImgbuild(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", testrepo.ImageEpoch)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	l := newImgLab(ctx, t)
	l.lock(ctx, t, "master")
	l.lock(ctx, t, "compute")
	var master, compute *imgbuild.Report
	t.Run("master builds", func(t *testing.T) {
		r := l.build(ctx, t, "master", "out", "cache", "1")
		master = r
		checkImage(ctx, t, r.Dir, map[string]string{
			"/etc/group":             "slurm:x:901:",
			"/etc/passwd":            "munge:x:900:900:",
			"/etc/slurm/cgroup.conf": "",
		}, []string{"/etc/systemd/system/multi-user.target.wants/slurmctld.service", "/etc/systemd/system/multi-user.target.wants/fail2ban.service"})
	})
	t.Run("compute builds", func(t *testing.T) {
		compute = l.build(ctx, t, "compute", "out", "cache", "1")
		checkImage(ctx, t, compute.Dir, map[string]string{
			"/etc/sysconfig/slurmd": "--conf-server master",
			"/etc/passwd":           "slurm:x:901:901:",
		}, []string{"/etc/systemd/system/multi-user.target.wants/slurmd.service", "/etc/systemd/system/multi-user.target.wants/munge.service"})
		ks, err := os.ReadFile(filepath.Join(compute.Dir, "install.ks"))
		if err != nil || !strings.Contains(string(ks), "%packages") || !strings.Contains(string(ks), "munge-1.0-1.el9.noarch") || strings.Contains(string(ks), "PRIVATE KEY") {
			t.Errorf("the version's install.ks does not pin the locked packages (or holds a key): %v\n%.400s", err, ks)
		}
	})
	if compute == nil {
		t.FailNow()
	}
	t.Run("selinux: the tree is labelled at build time", func(t *testing.T) {
		checkLabels(ctx, t, compute.Dir, map[string]string{
			"etc/passwd": "system_u:object_r:etc_t:s0", "usr/libexec/bootd-node": "system_u:object_r:bin_t:s0",
			"usr/share/standin/munge": "system_u:object_r:default_t:s0",
		})
	})
	t.Run("reproducible: a clean second build is byte-identical", func(t *testing.T) {
		again := l.build(ctx, t, "compute", "out-again", "cache-again", "1")
		sameFiles(t, compute.Dir, again.Dir)
	})
	t.Run("nothing changed: every layer and the packed root reused, the same bytes", func(t *testing.T) {
		r := l.build(ctx, t, "compute", "out-same", "cache", "1")
		for _, x := range r.Layers {
			if !x.Cached {
				t.Errorf("layer %s built again, want it from the cache", x.Layer)
			}
		}
		if !r.PackReused {
			t.Error("the root was packed again, want the packed root of the last build reused")
		}
		sameFiles(t, compute.Dir, r.Dir)
	})
	t.Run("cache: editing nfs rebuilds nfs and the layers above it only, and equals a clean build", func(t *testing.T) {
		editLayer(t, filepath.Join(l.dir, "layers", "nfs.toml"), "\n[[files]]\npath = \"/etc/imgbuild-edited\"\ncontent = \"edited\\n\"\n")
		_, err := imgbuild.Build(ctx, l.image("compute"), l.opts("out", "cache", "2"))
		if err == nil || !strings.Contains(err.Error(), "stale") {
			t.Fatalf("build with an edited layer and the old lock: %v, want a stale-lock refusal", err)
		}
		l.lock(ctx, t, "compute")
		r := l.build(ctx, t, "compute", "out", "cache", "2")
		above := false // nfs and every layer after it (monitoring) build on the edited tree
		for _, x := range r.Layers {
			above = above || x.Layer == "nfs"
			if want := !above; x.Cached != want {
				t.Errorf("layer %s cached=%v, want %v", x.Layer, x.Cached, want)
			}
		}
		if last := r.Layers[len(r.Layers)-1].Layer; last == "nfs" {
			t.Errorf("nfs is compute's top layer: the check above no longer shows layers above it rebuilt")
		}
		clean := l.build(ctx, t, "compute", "out-clean", "cache-clean", "2")
		sameFiles(t, r.Dir, clean.Dir)
		checkCacheHolds(t, filepath.Join(l.dir, "cache"), master, r)
	})
	t.Run("list and diff", func(t *testing.T) {
		vs, err := imgbuild.List(filepath.Join(l.dir, "out"), "compute")
		if err != nil || len(vs) != 2 || vs[0].Err != nil || vs[1].Err != nil {
			t.Fatalf("list = %+v, %v; want 2 verified versions", vs, err)
		}
		if _, err := imgbuild.Diff(filepath.Join(l.dir, "out"), "compute", "1", "2"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a tampered cache entry is detected and fetched again", func(t *testing.T) {
		entries, _ := filepath.Glob(filepath.Join(l.dir, "cache", "rpms", "sha256", "*.rpm"))
		if len(entries) == 0 {
			t.Fatal("no cached RPMs")
		}
		if err := os.WriteFile(entries[0], []byte("tampered"), 0o644); err != nil {
			t.Fatal(err)
		}
		// Packages are fetched (all of the lock's, each checked) when a layer needs them: make
		// the top layer of the last compute build needed.
		last, err := artifact.Open(filepath.Join(l.dir, "out", "compute", "2"))
		if err != nil {
			t.Fatal(err)
		}
		top := strings.TrimPrefix(last.Manifest.Layers[len(last.Manifest.Layers)-1].Digest, "sha256:")
		if err := os.RemoveAll(filepath.Join(l.dir, "cache", "layers", top)); err != nil {
			t.Fatal(err)
		}
		healed := l.build(ctx, t, "compute", "out-healed", "cache", "2")
		sameFiles(t, filepath.Join(l.dir, "out", "compute", "2"), healed.Dir)
	})
	t.Run("cache: removing an image file frees its trees", func(t *testing.T) {
		moved := filepath.Join(t.TempDir(), "master.toml")
		if err := os.Rename(l.image("master"), moved); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := os.Rename(moved, l.image("master")); err != nil {
				t.Fatal(err)
			}
		}()
		r := l.build(ctx, t, "compute", "out-moved", "cache", "3")
		checkCacheHolds(t, filepath.Join(l.dir, "cache"), r)
	})
	t.Run("the CI script builds twice, compares and publishes", func(t *testing.T) {
		l.lock(ctx, t, "master") // the nfs edit above made master's lock stale too
		l.lock(ctx, t, "compute-legacy")
		script := exec.CommandContext(ctx, "../ci/build-images.sh", "--tree", l.dir, "--site", l.site, "--version", "ci-1", "--publish", filepath.Join(l.dir, "published"))
		if out, err := script.CombinedOutput(); err != nil {
			t.Fatalf("ci/build-images.sh: %v\n%s", err, out)
		} else {
			t.Logf("ci/build-images.sh:\n%s", out)
		}
		for _, img := range []string{"master", "compute", "compute-legacy"} {
			checkImage(ctx, t, filepath.Join(l.dir, "published", img, "ci-1"), nil, nil)
		}
	})
	t.Run("bad input", func(t *testing.T) { badInput(ctx, t, l) })
}

// checkImage verifies the version as bootd would, reads files out of its squashfs, and lists
// its initramfs.
func checkImage(ctx context.Context, t *testing.T, dir string, contains map[string]string, present []string) {
	t.Helper()
	img, err := artifact.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := img.Verify(); err != nil {
		t.Fatalf("the manifest's hashes do not match the files: %v", err)
	}
	sq := filepath.Join(dir, "rootfs.squashfs")
	for path, want := range contains {
		out, err := exec.CommandContext(ctx, "unsquashfs", "-cat", sq, path).Output()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("%s in the image: %q (%v), want it to contain %q", path, out, err, want)
		}
	}
	list, err := exec.CommandContext(ctx, "unsquashfs", "-lls", "-d", "", sq).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range present {
		if !strings.Contains(string(list), p) {
			t.Errorf("%s missing from the image", p)
		}
	}
	for _, gone := range []string{"/var/cache/dnf/", "/var/lib/dnf/history"} {
		if strings.Contains(string(list), gone) {
			t.Errorf("normalization left %s in the image", gone)
		}
	}
	cpio := exec.CommandContext(ctx, "sh", "-c", "zcat "+filepath.Join(dir, "initramfs.img")+" | cpio -t")
	if out, err := cpio.Output(); err != nil || !strings.Contains(string(out), "init") {
		t.Errorf("initramfs is not a cpio with an init: %v\n%s", err, out)
	}
}

// sameFiles compares two versions file by file by their manifests (which Verify ties to the
// bytes) and the manifests themselves.
func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	ia, err := artifact.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := artifact.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.Verify(); err != nil {
		t.Fatal(err)
	}
	for name, fa := range ia.Manifest.Files {
		if fb := ib.Manifest.Files[name]; fa != fb {
			t.Errorf("%s differs: %s vs %s", name, fa.SHA256, fb.SHA256)
		} else {
			t.Logf("%s identical: sha256 %s (%d bytes)", name, fa.SHA256[:16], fa.Size)
		}
	}
	ma, _ := os.ReadFile(filepath.Join(a, "manifest.json"))
	mb, _ := os.ReadFile(filepath.Join(b, "manifest.json"))
	if string(ma) != string(mb) {
		t.Errorf("manifest.json differs between the two builds")
	}
}

// checkCacheHolds fails unless the cache's layers and packed roots are exactly those the given
// builds (each image's last) used: a build removes what nothing will reuse.
func checkCacheHolds(t *testing.T, cache string, builds ...*imgbuild.Report) {
	t.Helper()
	want := map[string]bool{}
	for _, b := range builds {
		if b == nil {
			t.Fatal("a build the cache check needs did not run")
		}
		for _, l := range b.Layers {
			want[l.Key] = true
		}
	}
	entries, err := os.ReadDir(filepath.Join(cache, "layers"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range entries {
		if sha256hex.Valid(e.Name()) {
			have[e.Name()] = true
		}
	}
	if !maps.Equal(have, want) {
		t.Errorf("cache holds %d layers, want the %d of each image's last build", len(have), len(want))
	}
	packed := map[string]bool{}
	for _, b := range builds {
		packed[b.PackedKey] = true
	}
	entries, err = os.ReadDir(filepath.Join(cache, "packed"))
	if err != nil {
		t.Fatal(err)
	}
	have = map[string]bool{}
	for _, e := range entries {
		have[e.Name()] = true
	}
	if !maps.Equal(have, packed) {
		t.Errorf("cache holds packed roots %v, want those of each image's last build %v", slices.Sorted(maps.Keys(have)), slices.Sorted(maps.Keys(packed)))
	}
}

func editLayer(t *testing.T, path, add string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(add); err != nil {
		t.Fatal(err)
	}
}

// badInput: a missing package, a tampered RPM in the repository, and a build killed midway
// each end with a clear error and no new version, and the versions before stay intact.
func badInput(ctx context.Context, t *testing.T, l *imgLab) {
	t.Run("missing package", func(t *testing.T) {
		bad := filepath.Join(l.dir, "images", "broken.toml")
		if err := os.WriteFile(bad, []byte("name = \"broken\"\nrole = \"compute\"\nlayers = [\"base\", \"ghost\"]\nreleasever = \"9\"\narch = \"x86_64\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		ghost := "name = \"ghost\"\nrequires = [\"base\"]\npackages = [\"no-such-package\"]\n"
		if err := os.WriteFile(filepath.Join(l.dir, "layers", "ghost.toml"), []byte(ghost), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := imgbuild.Lock(ctx, bad, l.opts("out", "cache", ""))
		if err == nil || !strings.Contains(err.Error(), "no-such-package") || !strings.Contains(err.Error(), "ghost") {
			t.Fatalf("lock with a missing package: %v, want an error naming the package and the layer", err)
		}
	})
	t.Run("a layer that tries to escape the build sandbox", func(t *testing.T) { escapeLayer(ctx, t, l) })
	t.Run("tampered RPM in the repository", func(t *testing.T) {
		rpms, _ := filepath.Glob(filepath.Join(l.repo, "Packages", "*", "munge-*.rpm"))
		if len(rpms) == 0 {
			t.Fatal("no munge RPM in the stand-in repository")
		}
		if err := os.WriteFile(rpms[0], []byte("not the locked package"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := imgbuild.Build(ctx, l.image("compute"), l.opts("out", "cache-fresh", "3"))
		if err == nil || !strings.Contains(err.Error(), "munge") {
			t.Fatalf("build from a tampered repository: %v, want a hash mismatch naming munge", err)
		}
		noVersion(t, filepath.Join(l.dir, "out", "compute", "3"))
	})
	t.Run("killed midway", func(t *testing.T) {
		bin := filepath.Join(l.dir, "imgbuild")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/imgbuild").CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		cmd := exec.CommandContext(ctx, bin, "build", l.image("compute"), "--site", l.site, "--out", filepath.Join(l.dir, "out"),
			"--cache", filepath.Join(l.dir, "cache-kill"), "--version", "4", "--log-format", "json")
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stderr)
		for sc.Scan() && !strings.Contains(sc.Text(), "layer ready") {
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		noVersion(t, filepath.Join(l.dir, "out", "compute", "4"))
		vs, err := imgbuild.List(filepath.Join(l.dir, "out"), "compute")
		if err != nil || len(vs) != 2 {
			t.Fatalf("after the killed build: %d versions (%v), want the 2 earlier ones intact", len(vs), err)
		}
		for _, v := range vs {
			if v.Err != nil {
				t.Errorf("version %s broken after the killed build: %v", v.Image.Manifest.Version, v.Err)
			}
		}
	})
	t.Run("killed at random points, then built", func(t *testing.T) { killLoop(ctx, t, l, filepath.Join(l.dir, "imgbuild")) })
}

// escapeLayer builds a layer on base whose commands try every escape of sandboxtest, each
// inverted (it fails the build if the escape works), then H1's mount as it is: the build fails on
// that last command with the sandbox named in the error, and the host shows none of them. A
// [[files]] path under /proc is refused when the layer loads, naming the file, line and key.
func escapeLayer(ctx context.Context, t *testing.T, l *imgLab) {
	escapes := sandboxtest.Escapes(t)
	var layer strings.Builder
	layer.WriteString("name = \"escape\"\nrequires = [\"base\"]\n")
	for _, e := range escapes {
		fmt.Fprintf(&layer, "\n[[run]]\ndescription = %q\ncommand = '''\nif ( %s ); then echo ESCAPED >&2; exit 1; fi\n'''\n", e.Name, e.Command)
	}
	mountTag := fmt.Sprintf("imgbuild-escape-%d", os.Getpid())
	fmt.Fprintf(&layer, "\n[[run]]\ndescription = \"mount\"\ncommand = \"busybox mkdir -p /mnt && busybox mount -t tmpfs %s /mnt\"\n", mountTag)
	layerPath := filepath.Join(l.dir, "layers", "escape.toml")
	if err := os.WriteFile(layerPath, []byte(layer.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	img := "name = \"escape\"\nrole = \"compute\"\nlayers = [\"base\", \"escape\"]\nreleasever = \"9\"\narch = \"x86_64\"\n"
	if err := os.WriteFile(l.image("escape"), []byte(img), 0o644); err != nil {
		t.Fatal(err)
	}
	l.lock(ctx, t, "escape")
	_, err := imgbuild.Build(ctx, l.image("escape"), l.opts("out", "cache", "1"))
	want := fmt.Sprintf("layer escape: run[%d]", len(escapes))
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "in the build sandbox") {
		t.Fatalf("build: %v, want the sandbox refusing %s (the mount)", err, want)
	}
	t.Logf("the error an admin sees: %v", err)
	for _, e := range escapes {
		e.Held(t)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), mountTag) {
		t.Errorf("the layer's tmpfs is mounted on the host")
	}
	noVersion(t, filepath.Join(l.dir, "out", "escape", "1"))

	proc := "name = \"escape\"\nrequires = [\"base\"]\n\n[[files]]\npath = \"/proc/sys/kernel/hostname\"\ncontent = \"escaped\\n\"\n"
	if err := os.WriteFile(layerPath, []byte(proc), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = imgbuild.Lock(ctx, l.image("escape"), l.opts("out", "cache", ""))
	if err == nil || !strings.Contains(err.Error(), "escape.toml:5: files[0].path") || !strings.Contains(err.Error(), "under /proc") {
		t.Errorf("lock with a file under /proc: %v, want it refused at escape.toml:5: files[0].path", err)
	}
}

func noVersion(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s exists after a failed build", dir)
	}
}

// checkLabels extracts paths from the version's rootfs.squashfs and checks each one's SELinux
// label (security.selinux), which imgbuild set with the image's setfiles and its file_contexts
// (the stand-in policy's: testrepo.SELinuxContexts).
func checkLabels(ctx context.Context, t *testing.T, version string, want map[string]string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "x")
	args := []string{"-no-progress", "-d", dir, filepath.Join(version, "rootfs.squashfs")}
	for p := range want {
		args = append(args, p)
	}
	if out, err := exec.CommandContext(ctx, "unsquashfs", args...).CombinedOutput(); err != nil {
		t.Fatalf("unsquashfs: %v\n%s", err, out)
	}
	for p, label := range want {
		buf := make([]byte, 256)
		n, err := unix.Lgetxattr(filepath.Join(dir, p), "security.selinux", buf)
		got := ""
		if err == nil {
			got = strings.TrimRight(string(buf[:n]), "\x00")
		}
		if got != label {
			t.Errorf("/%s labelled %q (%v), want %q", p, got, err, label)
		}
	}
}
