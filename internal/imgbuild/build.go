package imgbuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/kickstart"
	"github.com/labcluster/gpucluster/internal/resolve"
	"github.com/labcluster/gpucluster/internal/rootfs"
	"github.com/labcluster/gpucluster/internal/rpmcmd"
	"github.com/labcluster/gpucluster/internal/sandbox"
	"github.com/labcluster/gpucluster/internal/spec"
	kickstartfs "github.com/labcluster/gpucluster/kickstart"
)

// Report is what a build did.
type Report struct {
	Image, Version, Dir string
	Layers              []rootfs.Result
	Fetch, Pack, Total  time.Duration
	Chunks              ChunkReport
	// PackedKey names the packed root in the cache; PackReused says it came from there.
	PackedKey  string
	PackReused bool
}

// Build builds the image at imagePath from its lock and publishes a new version in o.OutDir.
// A stale or tampered lock, a package whose hash differs, or any failure leaves no version.
func Build(ctx context.Context, imagePath string, o Options) (*Report, error) {
	start := time.Now()
	if o.Version != "" {
		// Now, not in artifact.Write after the whole build.
		if err := artifact.CheckVersion(o.Version); err != nil {
			return nil, fmt.Errorf("--version: %w", err)
		}
	}
	plan, lock, err := loadLocked(imagePath, o)
	if err != nil {
		return nil, err
	}
	// Scriptlets and layer commands run in the sandbox: a host where it cannot start fails now,
	// before the downloads, not at the first scriptlet.
	if err := sandbox.Check(ctx); err != nil {
		return nil, err
	}
	r := &Report{Image: plan.Image.Name, Version: o.Version}
	if r.Version == "" {
		if r.Version, err = nextVersion(o.OutDir, r.Image, time.Now()); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(o.OutDir, r.Image, r.Version)); err == nil {
		return nil, fmt.Errorf("%s/%s already exists: versions are immutable, pick another --version", r.Image, r.Version)
	}
	unlock, err := lockCache(o)
	if err != nil {
		return nil, err
	}
	defer unlock()
	work, err := os.MkdirTemp(o.CacheDir, buildPrefix+r.Image+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	if err := buildInto(ctx, plan, lock, work, o, r); err != nil {
		return nil, err
	}
	// The version is published: a failure here costs disk space, not the build.
	imageFile, err := filepath.Abs(imagePath)
	if err == nil {
		err = recordKept(o.CacheDir, r.Image, imageFile, r.Layers, r.PackedKey, lockedDigests(lock))
	}
	if err == nil && !o.KeepCache {
		err = pruneCache(o.CacheDir, filepath.Dir(imageFile), o.Log)
	}
	if err != nil {
		o.Log.WithError(err).Warn("cache not pruned; it keeps what earlier builds left")
	}
	pruneChunks(ctx, o)
	r.Total = time.Since(start)
	return r, nil
}

// lockedDigests are the sha256 of every package the lock installs.
func lockedDigests(lock *resolve.LockFile) []string {
	var ds []string
	for _, p := range lock.Packages() {
		ds = append(ds, p.SHA256)
	}
	return ds
}

func buildInto(ctx context.Context, plan *spec.Plan, lock *resolve.LockFile, work string, o Options, r *Report) error {
	b := &rootfs.Builder{CacheDir: o.CacheDir, Epoch: lock.SourceDateEpoch, Log: o.Log, Install: installer(lock.SourceDateEpoch, o.Log)}
	st := steps(plan, lock, nil)
	// Packages are fetched (and each checked against the lock) when a layer needs them: with
	// every layer cached, none is read.
	if !b.Cached(st) {
		t := time.Now()
		src := resolve.Sources{BaseURLs: baseURLs(plan), PackageArchive: o.PackageArchive}
		rpms, err := resolve.Fetch(ctx, lock, src, rpmCacheDir(o.CacheDir),
			func(done, total int64) { o.progress("download", done, total) })
		if err != nil {
			return err
		}
		r.Fetch, st = time.Since(t), steps(plan, lock, rpms)
	}
	var err error
	if r.Layers, err = b.Build(ctx, st); err != nil {
		return err
	}
	t := time.Now()
	r.PackedKey = packedKey(r.Layers[len(r.Layers)-1].Key, lock.SourceDateEpoch)
	stage := filepath.Join(work, "stage")
	release, known, err := packRoot(ctx, b, r.Layers, r.Image, r.PackedKey, work, stage, lock.SourceDateEpoch, o)
	if err != nil {
		return err
	}
	r.PackReused = known != nil
	o.Log.WithField("reused", r.PackReused).Info("root packed")
	m, err := manifestInto(stage, release, plan, lock)
	if err != nil {
		return err
	}
	r.Pack = time.Since(t)
	m.Name, m.Version = r.Image, r.Version
	for _, l := range r.Layers {
		m.Layers = append(m.Layers, artifact.Layer{Name: l.Layer, Digest: "sha256:" + l.Key})
	}
	if r.Dir, err = publish(ctx, o, m, stage, known, r); err != nil || r.PackReused {
		return err
	}
	// The version is published: keep its root for the next build of the same layers.
	img, err := artifact.Open(r.Dir)
	if err == nil {
		err = keepPacked(stage, release, img.Manifest.Files, filepath.Join(work, "packed"), filepath.Join(packedDir(o.CacheDir), r.PackedKey))
	}
	if err != nil {
		o.Log.WithError(err).Warn("packed root not kept in the cache; the next build packs again")
	}
	return nil
}

// loadLocked loads the plan and its lock, and refuses a lock that no longer matches.
func loadLocked(imagePath string, o Options) (*spec.Plan, *resolve.LockFile, error) {
	plan, err := loadPlan(imagePath, o)
	if err != nil {
		return nil, nil, err
	}
	lock, err := resolve.Read(LockPath(imagePath))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%s has no lock (%s): run imgbuild lock %s first", imagePath, LockPath(imagePath), imagePath)
	}
	if err != nil {
		return nil, nil, err
	}
	if err := lock.CheckFresh(lockDigest(plan), layerRefs(plan)); err != nil {
		return nil, nil, err
	}
	return plan, lock, nil
}

// baseURLs maps repo ids to where packages are fetched now: the layers' locations with the
// site's overrides, which may differ from where the lock was made.
func baseURLs(p *spec.Plan) map[string]string {
	urls := map[string]string{}
	for _, r := range p.Repos() {
		urls[r.ID] = r.BaseURL
	}
	return urls
}

func steps(plan *spec.Plan, lock *resolve.LockFile, rpms map[string]string) []rootfs.Step {
	out := make([]rootfs.Step, len(plan.Layers))
	for i, l := range plan.Layers {
		st := rootfs.Step{Layer: l}
		for _, p := range lock.Layers[i].Packages { // CheckFresh matched the layers one to one
			st.RPMs = append(st.RPMs, rpms[p.NEVRA()])
			st.RPMDigests = append(st.RPMDigests, p.SHA256)
		}
		out[i] = st
	}
	return out
}

func installer(epoch int64, log logrus.FieldLogger) func(context.Context, string, []string) error {
	return func(ctx context.Context, root string, files []string) error {
		return rpmcmd.InstallFiles(ctx, root, files, rpmcmd.InstallOptions{SourceDateEpoch: epoch, Log: log})
	}
}

// manifestInto adds the lock and the kickstart to stage, which holds the packed root, and
// returns the manifest describing them (without name, version and layers).
func manifestInto(stage, release string, plan *spec.Plan, lock *resolve.LockFile) (artifact.Manifest, error) {
	if err := writeExtras(stage, plan, lock); err != nil {
		return artifact.Manifest{}, err
	}
	return artifact.Manifest{
		Created: time.Unix(lock.SourceDateEpoch, 0).UTC(),
		Kernel:  artifact.Kernel{File: "vmlinuz", Release: release}, Initrds: []string{"initramfs.img"},
		Rootfs:  &artifact.Rootfs{File: "rootfs.squashfs", Format: "squashfs"},
		Cmdline: strings.Join(plan.KernelArgs(), " "), Lock: lock.Digest(), Extras: []string{"lock.json", "install.ks"},
	}, nil
}

// writeExtras ships the lock (for imgbuild diff) and the image's kickstart (for a disk install
// of the same layers, completed per node by bootd) with the version. The kickstart streams into
// its file: the layers' files are in it, base64, and are never held whole.
func writeExtras(stage string, plan *spec.Plan, lock *resolve.LockFile) error {
	lockBytes, err := lock.Bytes()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(stage, "lock.json"), lockBytes, 0o644); err != nil {
		return err
	}
	img, err := KickstartImage(plan, lock)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(stage, "install.ks"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	err = kickstart.Write(f, img, kickstartfs.FS)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// lockCache takes o.CacheDir for this build alone (a second imgbuild on the same cache would
// share layer trees mid-build), then clears what killed builds left (leftovers.go).
func lockCache(o Options) (func(), error) {
	dir := o.CacheDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another imgbuild is using the cache %s; wait for it or give --cache another directory", dir)
	}
	if err := clearLeftovers(dir, o.OutDir, o.Log); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
