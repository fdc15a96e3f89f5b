package imgbuild

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
)

// lockFixture is an image of one layer, bash from a local stand-in repository, in a checkout
// of its own; it returns the image file.
func lockFixture(t *testing.T) string {
	t.Helper()
	testrepo.NeedTools(t, "dnf")
	repo := t.TempDir()
	if err := testrepo.Build(testrepo.Context(t), repo, testrepo.Standins([]string{"bash"}, testrepo.KernelFiles{})); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "layers", "base.toml"), `name = "base"
packages = ["bash"]
[[repos]]
id = "baseos"
baseurl = "file://`+repo+`/"
gpgcheck = false
`)
	image := filepath.Join(dir, "images", "compute.toml")
	writeFile(t, image, `name = "compute"
role = "compute"
layers = ["base"]
releasever = "9"
arch = "x86_64"
`)
	return image
}

// TestConcurrentLocks: two locks of one image on one cache at once (locks take no cache lock)
// each resolve in scratch of their own, agree, and leave no scratch behind; a third lock's
// scratch (here in the one directory every lock of the image once shared) is left alone.
func TestConcurrentLocks(t *testing.T) {
	image := lockFixture(t)
	t.Setenv("SOURCE_DATE_EPOCH", testrepo.ImageEpoch)
	o := Options{CacheDir: t.TempDir(), Log: testrepo.QuietLog()}
	other := filepath.Join(o.CacheDir, "lock-compute", "root", "marker")
	writeFile(t, other, "another lock's installroot")
	var wg sync.WaitGroup
	digests, errs := make([]string, 2), make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			_, lock, err := Lock(context.Background(), image, o)
			if errs[i] = err; err == nil {
				digests[i] = lock.Digest()
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("lock %d: %v", i, err)
		}
	}
	if digests[0] != digests[1] {
		t.Errorf("the two locks differ: %s, %s", digests[0], digests[1])
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another lock's scratch: %v", err)
	}
	if left, _ := os.ReadDir(o.CacheDir); len(left) != 1 {
		t.Errorf("cache holds %v, want only the other lock's scratch", left)
	}
}
