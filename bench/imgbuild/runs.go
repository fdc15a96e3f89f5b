package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/labcluster/gpucluster/internal/imgbuild"
	"github.com/labcluster/gpucluster/internal/pack"
)

// figures are one run's measurements.
type figures struct {
	lock, full, unchanged   cost
	relock, edited          cost // after the top layer's edit
	deepRelock, deep        cost // after the deep layer's edit (zero when not measured)
	fetch, install, pack    time.Duration
	editedPack              time.Duration // of the top layer's rebuild: normalizing and packing
	rebuilt, deepRebuilt    int           // layers the edited rebuilds built
	layers                  int
	hand, squash            cost   // the baseline's dnf transaction and mksquashfs
	imageBytes, scriptBytes int64  // rootfs.squashfs sizes
	treeBytes, cacheAfter   int64  // the baseline's unpacked tree; the cache after the builds
	imageSHA, sameSHA       string // sha256 of the full and the unchanged builds' squashfs
	editedSHA, deepSHA      string
}

func (b *bench) measure(ctx context.Context, i int) (figures, error) {
	var f figures
	cache := filepath.Join(b.dir, fmt.Sprintf("cache-%d", i))
	// The script right before the full build: the two see the machine's load of the same minutes.
	if err := b.byHand(ctx, i, &f); err != nil {
		return f, err
	}
	var err error
	if f.lock, err = b.lock(ctx); err != nil {
		return f, err
	}
	full, c, sha, err := b.build(ctx, cache, fmt.Sprintf("%d-full", i))
	if err != nil {
		return f, err
	}
	f.full, f.imageSHA, f.imageBytes = c, sha, full.imageBytes
	f.fetch, f.pack, f.layers = full.Fetch, full.Pack, len(full.Layers)
	for _, l := range full.Layers {
		f.install += l.Duration
	}
	progress("run %d: full build %s", i, c.Wall.Round(10*time.Millisecond))
	same, c, sha, err := b.build(ctx, cache, fmt.Sprintf("%d-unchanged", i))
	if err != nil {
		return f, err
	}
	if done := builtLayers(same); len(done) != 0 {
		return f, fmt.Errorf("a rebuild with nothing changed built %s", strings.Join(done, ", "))
	}
	f.unchanged, f.sameSHA = c, sha
	if f.relock, f.edited, f.rebuilt, f.editedSHA, f.editedPack, err = b.editAndBuild(ctx, cache, b.layer, i, "edited"); err != nil {
		return f, err
	}
	if b.deepLayer != "" {
		if f.deepRelock, f.deep, f.deepRebuilt, f.deepSHA, _, err = b.editAndBuild(ctx, cache, b.deepLayer, i, "deep"); err != nil {
			return f, err
		}
	}
	f.cacheAfter = duBytes(cache)
	if err := os.RemoveAll(cache); err != nil {
		return f, err
	}
	progress("run %d: full %s, unchanged %s, %s edited %s (%d of %d layers), %s edited %s (%d), script %s + %s",
		i, secs(f.full.Wall), secs(f.unchanged.Wall), b.layer, secs(f.edited.Wall), f.rebuilt, f.layers,
		b.deepLayer, secs(f.deep.Wall), f.deepRebuilt, secs(f.hand.Wall), secs(f.squash.Wall))
	return f, nil
}

// editAndBuild edits the layer, locks again and builds: the lock's and the build's costs, how
// many layers were built (the edited one first, or an error) and the image's sha256.
func (b *bench) editAndBuild(ctx context.Context, cache, layer string, i int, what string) (relock, build cost, rebuilt int, sha string, pack time.Duration, err error) {
	if err = editLayer(b.layerPath(layer), i); err != nil {
		return
	}
	if relock, err = b.lock(ctx); err != nil {
		return
	}
	var r *built
	if r, build, sha, err = b.build(ctx, cache, fmt.Sprintf("%d-%s", i, what)); err != nil {
		return
	}
	pack = r.Pack
	done := builtLayers(r)
	if len(done) == 0 || done[0] != layer {
		err = fmt.Errorf("after editing %s the rebuild built %v, want %s first", layer, done, layer)
	}
	progress("run %d: %s edited, %d layers built in %s", i, layer, len(done), secs(build.Wall))
	return relock, build, len(done), sha, pack, err
}

func (b *bench) lock(ctx context.Context) (cost, error) {
	return b.runStep(ctx, step{Kind: "lock", Image: b.imagePath(), Site: b.site.Path, Out: b.outDir(), Cache: filepath.Join(b.dir, "cache-lock")}, nil)
}

func (b *bench) outDir() string { return filepath.Join(b.dir, "out") }

// build runs imgbuild build into a fresh version, returns its report, cost and the sha256 of
// its rootfs.squashfs, and removes the version (only its figures are kept: disk).
func (b *bench) build(ctx context.Context, cache, version string) (*built, cost, string, error) {
	var res stepResult
	c, err := b.runStep(ctx, step{Kind: "build", Image: b.imagePath(), Site: b.site.Path, Out: b.outDir(), Cache: cache, Version: version}, &res)
	if err != nil {
		return nil, c, "", err
	}
	if res.Report == nil {
		return nil, c, "", errors.New("the build step reported nothing")
	}
	image := filepath.Join(res.Report.Dir, "rootfs.squashfs")
	sha, err := fileSHA(image)
	if err != nil {
		return nil, c, "", err
	}
	r := &built{Report: res.Report}
	if r.imageBytes, err = fileSize(image); err != nil {
		return nil, c, "", err
	}
	return r, c, sha, os.RemoveAll(res.Report.Dir)
}

// built is a build's report and the size of its rootfs.squashfs.
type built struct {
	*imgbuild.Report
	imageBytes int64
}

func builtLayers(r *built) []string {
	var built []string
	for _, l := range r.Layers {
		if !l.Cached {
			built = append(built, l.Layer)
		}
	}
	return built
}

// editLayer adds a file to the layer, as an admin's edit of a configuration file would.
func editLayer(path string, i int) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "\n[[files]]\npath = \"/etc/bench-edit-%s-%d\"\ncontent = \"edit %d\\n\"\n", filepath.Base(path), i, i)
	return errors.Join(err, f.Close())
}

// byHand installs the image's packages into an empty root with dnf in one transaction, then
// packs the root with mksquashfs with imgbuild's compressor, as a script would.
func (b *bench) byHand(ctx context.Context, i int, f *figures) error {
	dir := filepath.Join(b.dir, fmt.Sprintf("hand-%d", i))
	defer os.RemoveAll(dir)
	st := step{Kind: "hand-install", Root: filepath.Join(dir, "root"), Work: filepath.Join(dir, "work"), Repos: b.site.Repos(),
		Streams: b.site.Streams, Names: b.site.Names, Cache: dir}
	var err error
	if f.hand, err = b.runStep(ctx, st, nil); err != nil {
		return err
	}
	f.treeBytes = duBytes(st.Root)
	out := filepath.Join(dir, "zstd.squashfs")
	args := []string{st.Root, out, "-noappend", "-quiet", "-no-progress", "-comp", "zstd", "-Xcompression-level", strconv.Itoa(pack.DefaultZstdLevel)}
	if f.squash, err = b.runStep(ctx, step{Kind: "squash", Args: args, Cache: dir}, nil); err != nil {
		return err
	}
	f.scriptBytes, err = fileSize(out)
	return err
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func fileSHA(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
