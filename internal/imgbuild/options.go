package imgbuild

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/resolve"
	"github.com/labcluster/gpucluster/internal/spec"
)

// Options are what every command shares.
type Options struct {
	LayersDir string // default: layers/ beside the image file's directory
	SitePath  string // optional mirror overrides (spec.Site)
	OutDir    string // the images directory bootd serves
	CacheDir  string // downloaded RPMs, layer trees, scratch space
	Version   string // build only; default: YYYY.MM.DD-N
	// PackageArchive (build only) is a directory or URL of <sha256>.rpm files, tried before the
	// mirrors: the packages CI published beside earlier versions (resolve.Sources).
	PackageArchive string
	// KeepCache (build only) keeps every layer tree and package in the cache; by default a build
	// leaves only what each image's last build used (prune.go).
	KeepCache bool
	Log       logrus.FieldLogger
	// Progress reports long steps (downloads, packing); nil reports nothing.
	Progress func(step string, done, total int64)
}

func (o Options) progress(step string, done, total int64) {
	if o.Progress != nil {
		o.Progress(step, done, total)
	}
}

// loadPlan reads the image, its layers and the site file, and orders and checks them.
func loadPlan(imagePath string, o Options) (*spec.Plan, error) {
	img, err := spec.LoadImage(imagePath)
	if err != nil {
		return nil, err
	}
	var site *spec.Site
	if o.SitePath != "" {
		if site, err = spec.LoadSite(o.SitePath); err != nil {
			return nil, err
		}
	}
	dir := o.LayersDir
	if dir == "" {
		dir = filepath.Join(filepath.Dir(imagePath), "..", "layers")
	}
	return spec.Resolve(img, dir, site)
}

// LockPath is where the lock of the image file at imagePath lives: beside it.
func LockPath(imagePath string) string {
	return strings.TrimSuffix(imagePath, filepath.Ext(imagePath)) + ".lock.json"
}

func layerRefs(p *spec.Plan) []resolve.LayerRef {
	refs := make([]resolve.LayerRef, len(p.Layers))
	for i, l := range p.Layers {
		refs[i] = resolve.LayerRef{Name: l.Name, Digest: l.Digest}
	}
	return refs
}

// sourceDateEpoch is the time a new lock records for its builds: SOURCE_DATE_EPOCH when set
// (CI sets it from the tag), else the time of the last commit touching the image's
// directory, else now. Every build of that lock then stamps the same times.
func sourceDateEpoch(imagePath string) (int64, error) {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		// Not 0: rpm takes an unset or zero SOURCE_DATE_EPOCH alike and records the build's own time.
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want a positive Unix time", s)
		}
		return n, nil
	}
	// The pathspec limits the log to commits touching the directory, not the whole repository's.
	out, err := exec.Command("git", "-C", filepath.Dir(imagePath), "log", "-1", "--format=%ct", "--", ".").Output()
	if n, perr := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && perr == nil && n > 0 {
		return n, nil
	}
	return time.Now().Unix(), nil
}

// nextVersion is today's date (UTC) and one more than the highest counter already used today.
func nextVersion(outDir, name string, now time.Time) (string, error) {
	day := now.UTC().Format("2006.01.02")
	entries, err := os.ReadDir(filepath.Join(outDir, name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	highest := 0
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name(), day+"-"); ok {
			if i, err := strconv.Atoi(n); err == nil && i > highest {
				highest = i
			}
		}
	}
	return fmt.Sprintf("%s-%d", day, highest+1), nil
}

// lockDigest is the plan's digest as locks record it.
func lockDigest(p *spec.Plan) string { return "sha256:" + p.LockDigest() }
