package imgbuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/pack"
	"github.com/labcluster/gpucluster/internal/rootfs"
	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// The packed root (kernel, initramfs, squashfs) of the last build of each image is kept in
// <cache>/packed/<key>, the key a digest of the top layer's key (which covers every layer
// below), the epoch and how packing is done: a build whose layers all come from the cache
// links these files into its version instead of normalizing and packing gigabytes again.

// packFormat names how the root is normalized and packed: change it whenever rootfs.Normalize
// or pack changes what it makes from a tree, so that no older result is taken for this one's.
const packFormat = "packed/1"

// packedFiles are what a packed result holds, besides its record (packedRecord).
var packedFiles = []string{"vmlinuz", "initramfs.img", "rootfs.squashfs"}

// packedRecord is <cache>/packed/<key>/packed.json: the kernel release, and each file's size and
// sha256 as the version published from it recorded them. A reuse checks every file against it:
// the files are hard links shared with versions, and one changed in place must not pass into a
// new version with a manifest made from its new bytes.
type packedRecord struct {
	Release string                   `json:"release"`
	Files   map[string]artifact.File `json:"files"`
}

const packedRecordFile = "packed.json"

func packedDir(cacheDir string) string { return filepath.Join(cacheDir, "packed") }

// packedKey is the key of the packed result of a build whose top layer has key top.
func packedKey(top string, epoch int64) string {
	h := sha256.New()
	fmt.Fprintf(h, "format %s\ntop %s\nepoch %d\nzstd %d\n", packFormat, top, epoch, pack.DefaultZstdLevel)
	return hex.EncodeToString(h.Sum(nil))
}

// packRoot puts the kernel, initramfs and squashfs of the layers into stage, from the packed
// result of the same layers when the cache has it whole, else by mounting the layers' merged
// view, normalizing and packing it. It returns the kernel release and whether the result was
// reused (with the files' recorded sizes and digests, checked); a new one enters the cache with
// keepPacked once its version is published.
func packRoot(ctx context.Context, b *rootfs.Builder, layers []rootfs.Result, image, key, work, stage string, epoch int64, o Options) (string, map[string]artifact.File, error) {
	cached := filepath.Join(packedDir(o.CacheDir), key)
	release, files, err := linkPacked(cached, stage)
	switch {
	case err == nil:
		return release, files, nil
	case errors.Is(err, errPackedChanged):
		o.Log.WithError(err).Warn("the cached packed root changed since it was packed; packing again")
		if err := os.RemoveAll(cached); err != nil {
			return "", nil, err
		}
		if err := os.RemoveAll(stage); err != nil {
			return "", nil, err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return "", nil, err
	}
	if err := dropSuperseded(o.CacheDir, image, key); err != nil {
		return "", nil, err
	}
	release, err = packMerged(ctx, b, layers, filepath.Join(work, "root"), stage, epoch, o)
	return release, nil, err
}

// packMerged mounts the merged view, normalizes it (what it changes goes to scratch, never to
// the layers) and packs it into stage.
func packMerged(ctx context.Context, b *rootfs.Builder, layers []rootfs.Result, scratch, stage string, epoch int64, o Options) (string, error) {
	m, err := b.Mount(layers, scratch)
	if err != nil {
		return "", err
	}
	release, err := normalizeAndPack(ctx, m.Dir, stage, epoch, o)
	return release, errors.Join(err, m.Unmount())
}

func normalizeAndPack(ctx context.Context, tree, stage string, epoch int64, o Options) (string, error) {
	if err := rootfs.Label(ctx, tree); err != nil {
		return "", err
	}
	if err := rootfs.Normalize(tree, epoch); err != nil {
		return "", err
	}
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return "", err
	}
	kernel, release, err := pack.Kernel(tree)
	if err != nil {
		return "", err
	}
	initrd, err := pack.Initramfs(tree, release)
	if err != nil {
		return "", err
	}
	for src, dst := range map[string]string{kernel: "vmlinuz", initrd: "initramfs.img"} {
		if err := pack.CopyFile(src, filepath.Join(stage, dst)); err != nil {
			return "", err
		}
	}
	opts := pack.SquashOptions{Epoch: epoch, Progress: func(s string) { o.progress("squashfs "+s, 0, 0) }}
	return release, pack.Squashfs(ctx, tree, filepath.Join(stage, "rootfs.squashfs"), opts)
}

var errPackedChanged = errors.New("packed root changed")

// linkPacked links a packed result's files into stage, after checking each against its record,
// and returns its kernel release and the files' sizes and digests; an error wrapping
// fs.ErrNotExist when there is none, one wrapping errPackedChanged when a file is not what was
// recorded.
func linkPacked(cached, stage string) (string, map[string]artifact.File, error) {
	data, err := os.ReadFile(filepath.Join(cached, packedRecordFile))
	if err != nil {
		return "", nil, err
	}
	var rec packedRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return "", nil, fmt.Errorf("%w: %s: %v", errPackedChanged, packedRecordFile, err)
	}
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return "", nil, err
	}
	for _, f := range packedFiles {
		src := filepath.Join(cached, f)
		if err := checkFile(src, rec.Files[f]); err != nil {
			return "", nil, err
		}
		if err := os.Link(src, filepath.Join(stage, f)); err != nil {
			return "", nil, fmt.Errorf("reuse the packed root: %w", err)
		}
	}
	return rec.Release, rec.Files, nil
}

// checkFile fails with errPackedChanged unless path has want's size and sha256.
func checkFile(path string, want artifact.File) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %v", errPackedChanged, err)
	}
	defer f.Close()
	sum, n, err := sha256hex.Of(f)
	if err != nil {
		return err
	}
	if n != want.Size || sum != want.SHA256 {
		return fmt.Errorf("%w: %s is %d bytes with sha256 %s, packed as %d bytes with %s", errPackedChanged, path, n, sum, want.Size, want.SHA256)
	}
	return nil
}

// keepPacked links stage's packed files into the cache under cached with their record (release,
// and the sizes and digests the published version's manifest has), through tmp: made whole,
// synced, then renamed into place, so a key names a finished result only.
func keepPacked(stage, release string, files map[string]artifact.File, tmp, cached string) error {
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	rec := packedRecord{Release: release, Files: map[string]artifact.File{}}
	for _, f := range packedFiles {
		if err := os.Link(filepath.Join(stage, f), filepath.Join(tmp, f)); err != nil {
			return err
		}
		rec.Files[f] = files[f]
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, packedRecordFile), append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := syncAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, cached); err != nil {
		return err
	}
	return syncPath(filepath.Dir(cached))
}

// syncAll makes dir's files and dir itself durable.
func syncAll(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := syncPath(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return syncPath(dir)
}

func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// dropSuperseded removes the packed root of image's last build, which this build (packing key)
// replaces, unless another image's record names it too: the cache then never holds two packed
// roots of one image, a gigabyte or more each. Should this build fail, the next build of the
// old lock packs again from its cached layers. A version published from it keeps its own link.
func dropSuperseded(cacheDir, image, key string) error {
	records, err := readRecords(cacheDir)
	if err != nil {
		return err
	}
	old := records[filepath.Join(keptDir(cacheDir), image+".json")].Packed
	if !sha256hex.Valid(old) || old == key {
		return nil // none (or not a key: never a path to remove)
	}
	for path, rec := range records {
		if rec.Packed == old && filepath.Base(path) != image+".json" {
			return nil
		}
	}
	return os.RemoveAll(filepath.Join(packedDir(cacheDir), old))
}

// prunePacked removes the packed results that keep does not name.
func prunePacked(cacheDir string, keep map[string]bool) (int, error) {
	return sha256hex.Prune(packedDir(cacheDir), "", keep, func(path, _ string) error { return os.RemoveAll(path) })
}
