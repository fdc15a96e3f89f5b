package imgbuild

import (
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/atomicfile"
	"github.com/labcluster/gpucluster/internal/resolve"
	"github.com/labcluster/gpucluster/internal/rootfs"
)

// imgbuild's own scratch directories in the cache: a build's work, made under the cache lock,
// and a lock's installroot, made under none.
const (
	buildPrefix = "build-"
	lockPrefix  = "lock-"
)

// staleAge is how old scratch that the cache lock does not cover must be before a build takes it
// for a killed process's and removes it: imgbuild lock takes no cache lock, and builds with
// other caches publish into the same images directory, so younger scratch may be in use. A lock
// or a publish takes minutes; a day leaves a wide margin.
const staleAge = 24 * time.Hour

// leftoverKind is one sort of scratch that a SIGKILLed imgbuild leaves for ever.
type leftoverKind struct {
	what string // for the log
	list func() ([]string, error)
	// minAge is 0 for what only a build holding the cache lock makes: none of it is live.
	minAge time.Duration
}

func leftoverKinds(cacheDir, outDir string) []leftoverKind {
	glob := func(pattern string) func() ([]string, error) {
		return func() ([]string, error) { return filepath.Glob(pattern) }
	}
	return []leftoverKind{
		{"build scratch", glob(filepath.Join(cacheDir, buildPrefix+"*")), 0},
		{"layer stages", func() ([]string, error) { return rootfs.Stages(cacheDir) }, 0},
		{"partial downloads", func() ([]string, error) { return resolve.Partials(rpmCacheDir(cacheDir)) }, 0},
		{"unfinished cache records", func() ([]string, error) { return atomicfile.Temps(keptDir(cacheDir)) }, 0},
		{"lock scratch", glob(filepath.Join(cacheDir, lockPrefix+"*")), staleAge},
		{"unfinished versions", func() ([]string, error) { return artifact.Unfinished(outDir) }, staleAge},
	}
}

// cleanStale removes one leftover. A variable so that a test can make a removal fail: the tests
// run as root, whom no file mode refuses, and chattr +i does not work on every file system (tmpfs).
var cleanStale = rootfs.CleanStale

// clearLeftovers removes what killed imgbuilds left in the cache and the images directory, and
// logs what it removed. Callers hold the cache lock. What the lock covers must go (a build would
// trip over it); what it does not cover may belong to another user of a shared images directory,
// so what cannot be removed there is only warned about.
func clearLeftovers(cacheDir, outDir string, log logrus.FieldLogger) error {
	for _, k := range leftoverKinds(cacheDir, outDir) {
		paths, err := k.list()
		if err != nil {
			return err
		}
		if k.minAge > 0 {
			paths = olderThan(paths, time.Now().Add(-k.minAge))
		}
		count, bytes := 0, int64(0)
		for _, p := range paths {
			n, err := cleanStale(p)
			switch {
			case err != nil && k.minAge == 0:
				return err
			case err != nil:
				log.WithError(err).WithField("path", p).Warn("cannot remove what a killed build left; remove it by hand")
			default:
				count, bytes = count+1, bytes+n
			}
		}
		if count > 0 {
			log.WithFields(logrus.Fields{"what": k.what, "count": count, "bytes": bytes}).Info("removed what killed builds left")
		}
	}
	return nil
}

// olderThan keeps the paths last modified before t.
func olderThan(paths []string, t time.Time) []string {
	var old []string
	for _, p := range paths {
		if fi, err := os.Lstat(p); err == nil && fi.ModTime().Before(t) {
			old = append(old, p)
		}
	}
	return old
}

// rpmCacheDir is where Fetch caches packages under a build's cache directory.
func rpmCacheDir(cacheDir string) string { return filepath.Join(cacheDir, "rpms") }
