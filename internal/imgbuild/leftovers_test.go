package imgbuild

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/labcluster/gpucluster/internal/rootfs"
	"github.com/labcluster/gpucluster/internal/testkit/testhook"
)

// TestLockCacheClearsLeftovers: taking the cache for a build removes what SIGKILLed imgbuilds
// left: under the cache lock whatever its age, outside it (a lock's scratch, an images directory
// other caches publish into) only when a day old; cache entries and published versions stay.
// It logs how many of each kind it removed and their bytes.
func TestLockCacheClearsLeftovers(t *testing.T) {
	root := t.TempDir()
	dayOld := time.Now().Add(-25 * time.Hour)
	cases := []struct {
		name  string
		entry string // relative to root; what a cleanup removes, or keeps, whole
		file  string // a 5-byte file under entry ("": entry is the file)
		old   bool   // entry last modified a day ago
		gone  bool
	}{
		{"build scratch", "cache/build-compute-1", "tree/etc/motd", false, true},
		{"layer stage", "cache/layers/.build-base-1", "tree/etc/motd", false, true},
		{"partial download", "cache/rpms/sha256/.partial-1", "", false, true},
		{"cache record temp", "cache/kept/.compute.json.tmp-1", "", false, true},
		{"lock scratch a day old", "cache/lock-compute-1", "work/x", true, true},
		{"lock scratch in use", "cache/lock-compute-2", "work/x", false, false},
		{"unfinished version a day old", "out/compute/.2026.01.01-1.tmp-1", "vmlinuz", true, true},
		{"unfinished version being written", "out/master/.2026.01.01-2.tmp-2", "vmlinuz", false, false},
		{"cached layer", "cache/layers/" + hexName("a"), "etc/motd", true, false},
		{"cached package", "cache/rpms/sha256/" + hexName("1") + ".rpm", "", true, false},
		{"published version", "out/compute/2026.01.01-1", "vmlinuz", true, false},
		{"cache record", "cache/kept/compute.json", "", true, false},
	}
	for _, tt := range cases {
		path := filepath.Join(root, tt.entry)
		writeFile(t, filepath.Join(path, tt.file), "hello")
		if tt.old {
			if err := os.Chtimes(path, dayOld, dayOld); err != nil {
				t.Fatal(err)
			}
		}
	}
	log, hook := logtest.NewNullLogger()
	o := Options{CacheDir: filepath.Join(root, "cache"), OutDir: filepath.Join(root, "out"), Log: log}
	unlock, err := lockCache(o)
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := os.Lstat(filepath.Join(root, tt.entry)); (err != nil) != tt.gone {
				t.Errorf("%s: removed %v, want %v", tt.entry, err != nil, tt.gone)
			}
		})
	}
	type freed struct {
		count int
		bytes int64
	}
	logged := map[string]freed{}
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.InfoLevel {
			logged[e.Data["what"].(string)] = freed{e.Data["count"].(int), e.Data["bytes"].(int64)}
		}
	}
	one := freed{count: 1, bytes: 5}
	want := map[string]freed{"build scratch": one, "layer stages": one, "partial downloads": one, "unfinished cache records": one, "lock scratch": one, "unfinished versions": one}
	if !maps.Equal(logged, want) {
		t.Errorf("logged %v, want %v", logged, want)
	}
}

// TestClearLeftoversWarnsAndContinues: a day-old leftover outside the cache lock's cover that
// cannot be removed (another user's, in a shared images directory) is only warned about, naming
// it and why, and the cleanup goes on: the build may start, and the leftovers after it, of its
// kind and of the next, are gone.
func TestClearLeftoversWarnsAndContinues(t *testing.T) {
	root := t.TempDir()
	cache, out := filepath.Join(root, "cache"), filepath.Join(root, "out")
	stuck := filepath.Join(cache, "lock-compute-1")
	others := []string{filepath.Join(cache, "lock-compute-2"), filepath.Join(out, "compute", ".1.tmp-1")}
	dayOld := time.Now().Add(-25 * time.Hour)
	for _, p := range append([]string{stuck}, others...) {
		writeFile(t, filepath.Join(p, "x"), "hello")
		if err := os.Chtimes(p, dayOld, dayOld); err != nil {
			t.Fatal(err)
		}
	}
	denied := errors.New("operation not permitted")
	testhook.Set(t, &cleanStale, func(path string) (int64, error) {
		if path == stuck {
			return 0, denied
		}
		return rootfs.CleanStale(path)
	})
	log, hook := logtest.NewNullLogger()
	if err := clearLeftovers(cache, out, log); err != nil {
		t.Fatalf("clearLeftovers: %v, want it to warn and go on", err)
	}
	for _, p := range others {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s left behind", p)
		}
	}
	var warned bool
	for _, e := range hook.AllEntries() {
		err, _ := e.Data[logrus.ErrorKey].(error)
		warned = warned || e.Level == logrus.WarnLevel && e.Data["path"] == stuck && errors.Is(err, denied)
	}
	if !warned {
		t.Errorf("no warning naming %s and its error", stuck)
	}
}
