//go:build e2e

package e2e

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/labcluster/gpucluster/internal/imgbuild"
)

// killLoop kills `imgbuild build` with SIGKILL at random moments, alternately with a cold cache
// (fetching, installing) and a warm one (reusing layers, packing), each time into a cache the
// earlier kills left half-written. After each kill no new version is visible and the earlier ones
// still verify; then a build into the last half-written cache succeeds and verifies.
func killLoop(ctx context.Context, t *testing.T, l *imgLab, bin string) {
	out := filepath.Join(l.dir, "out")
	before, err := imgbuild.List(out, "compute")
	if err != nil {
		t.Fatal(err)
	}
	build := func(version, cache string) *exec.Cmd {
		return exec.CommandContext(ctx, bin, "build", l.image("compute"), "--site", l.site, "--out", out,
			"--cache", filepath.Join(l.dir, cache), "--version", version, "--log-format", "json")
	}
	// A cold cache holds the downloaded RPMs only (the repository's munge was tampered with
	// above): every layer is installed and packed again.
	cold := func(cache string) {
		_ = os.RemoveAll(filepath.Join(l.dir, cache))
		if err := os.MkdirAll(filepath.Join(l.dir, cache), 0o755); err != nil {
			t.Fatal(err)
		}
		if o, err := exec.CommandContext(ctx, "cp", "-a", filepath.Join(l.dir, "cache", "rpms"), filepath.Join(l.dir, cache, "rpms")).CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, o)
		}
	}
	cold("cache-loop-cold-ref")
	cold("cache-loop-warm") // warmed by its reference build below
	// How long a whole build takes, cold and warm, bounds the kill points.
	full := map[string]time.Duration{}
	for _, cache := range []string{"cache-loop-cold-ref", "cache-loop-warm", "cache-loop-warm"} { // warm up, then time it
		start := time.Now()
		if o, err := build("ref-"+filepath.Base(cache), cache).CombinedOutput(); err != nil {
			t.Fatalf("reference build with %s: %v\n%s", cache, err, o)
		}
		full[cache] = time.Since(start)
		_ = os.RemoveAll(filepath.Join(out, "compute", "ref-"+filepath.Base(cache)))
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	const kills = 6
	var points []string
	leaked := 0
	for i := range kills {
		cache, kind := "cache-loop-cold", "cold"
		if i%2 == 1 {
			cache, kind = "cache-loop-warm", "warm"
		}
		if i%2 == 0 {
			cold(cache)
		}
		ref := full["cache-loop-warm"]
		if kind == "cold" {
			ref = full["cache-loop-cold-ref"]
		}
		delay := time.Duration(rng.Int64N(int64(ref)*9/10)) + 10*time.Millisecond
		version := "kill-" + string(rune('a'+i))
		cmd := build(version, cache)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		_ = cmd.Process.Kill()
		err := cmd.Wait()
		points = append(points, kind+" at "+delay.Round(10*time.Millisecond).String()+"/"+ref.Round(100*time.Millisecond).String())
		if err == nil {
			t.Logf("build %s finished before its kill at %s", version, delay)
			_ = os.RemoveAll(filepath.Join(out, "compute", version))
			continue
		}
		if ms := mountsUnder(filepath.Join(l.dir, cache)); len(ms) > 0 {
			// The kill came while a layer installed: its /proc and /dev stay mounted in the cache
			// until the next build there clears them. A cold cache is removed before its next
			// build, so unmount first: removing a mounted /proc would reach into the kernel's.
			leaked += len(ms)
			if kind == "cold" {
				for i := len(ms) - 1; i >= 0; i-- {
					_ = unix.Unmount(ms[i], unix.MNT_DETACH)
				}
			}
		}
		if publishedWhole(out, version) {
			// The kill came after the version was renamed into place (the build still had its
			// cache to prune): it is there whole and verifies, which is what a kill may leave.
			t.Logf("build %s was killed at %s, after it published its version: whole and verified", version, delay)
			_ = os.RemoveAll(filepath.Join(out, "compute", version))
			continue
		}
		noVersion(t, filepath.Join(out, "compute", version))
		vs, err := imgbuild.List(out, "compute")
		if err != nil || len(vs) != len(before) {
			t.Fatalf("after kill %d (%s): %d versions (%v), want the %d earlier ones", i+1, points[i], len(vs), err, len(before))
		}
		for _, v := range vs {
			if v.Err != nil {
				t.Fatalf("after kill %d: version %s broken: %v", i+1, v.Image.Manifest.Version, v.Err)
			}
		}
		entries, _ := os.ReadDir(filepath.Join(out, "compute"))
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), version) {
				t.Errorf("after kill %d: %s left in the output directory", i+1, e.Name())
			}
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(l.dir, "cache-loop-warm", "build-*"))
	// The next build, into the cache the last kill left, succeeds.
	start := time.Now()
	if o, err := build("after-kills", "cache-loop-warm").CombinedOutput(); err != nil {
		t.Fatalf("build after %d kills: %v\n%s", kills, err, o)
	}
	checkImage(ctx, t, filepath.Join(out, "compute", "after-kills"), nil, nil)
	// The build after the kills cleared what they left: no mount, no scratch directory.
	warm := filepath.Join(l.dir, "cache-loop-warm")
	if ms := mountsUnder(warm); len(ms) > 0 {
		t.Errorf("mounts left in the cache after the next build: %v", ms)
	}
	stale, _ := filepath.Glob(filepath.Join(warm, "build-*"))
	staleLayers, _ := filepath.Glob(filepath.Join(warm, "layers", ".build-*"))
	if len(stale)+len(staleLayers) > 0 {
		t.Errorf("scratch directories left after the next build: %v %v", stale, staleLayers)
	}
	t.Logf("%d SIGKILLs of imgbuild build (%s); they left %d scratch directories and %d mounts (/proc, /dev of a layer being installed); the build after them cleared those, succeeded in %s and verifies",
		kills, strings.Join(points, ", "), len(leftovers), leaked, time.Since(start).Round(100*time.Millisecond))
}

// mountsUnder lists the mount points below dir, in mount order.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil
	}
	var ms []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			ms = append(ms, f[1])
		}
	}
	return ms
}

// publishedWhole reports whether out holds compute's version and it verifies as bootd would.
func publishedWhole(out, version string) bool {
	vs, err := imgbuild.List(out, "compute")
	if err != nil {
		return false
	}
	for _, v := range vs {
		if v.Err == nil && v.Image != nil && v.Image.Manifest.Version == version {
			return true
		}
	}
	return false
}
