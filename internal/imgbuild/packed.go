package imgbuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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

// packedFiles are what a packed result holds, besides releaseFile.
var packedFiles = []string{"vmlinuz", "initramfs.img", "rootfs.squashfs"}

// releaseFile holds the kernel release the packed kernel is.
const releaseFile = "release"

func packedDir(cacheDir string) string { return filepath.Join(cacheDir, "packed") }

// packedKey is the key of the packed result of a build whose top layer has key top.
func packedKey(top string, epoch int64) string {
	h := sha256.New()
	fmt.Fprintf(h, "format %s\ntop %s\nepoch %d\nzstd %d\n", packFormat, top, epoch, pack.DefaultZstdLevel)
	return hex.EncodeToString(h.Sum(nil))
}

// packRoot puts the kernel, initramfs and squashfs of the layers into stage, from the packed
// result of the same layers when the cache has it, else by mounting the layers' merged view,
// normalizing and packing it, and keeping the result. It returns the kernel release and whether
// the result was reused.
func packRoot(ctx context.Context, b *rootfs.Builder, layers []rootfs.Result, image, key, work, stage string, epoch int64, o Options) (string, bool, error) {
	cached := filepath.Join(packedDir(o.CacheDir), key)
	if release, err := linkPacked(cached, stage); err == nil {
		return release, true, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	if err := dropSuperseded(o.CacheDir, image, key); err != nil {
		return "", false, err
	}
	release, err := packMerged(ctx, b, layers, filepath.Join(work, "root"), stage, epoch, o)
	if err != nil {
		return "", false, err
	}
	return release, false, keepPacked(stage, release, filepath.Join(work, "packed"), cached)
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

// linkPacked links a packed result's files into stage and returns its kernel release; an
// error wrapping fs.ErrNotExist when there is none.
func linkPacked(cached, stage string) (string, error) {
	release, err := os.ReadFile(filepath.Join(cached, releaseFile))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return "", err
	}
	for _, f := range packedFiles {
		if err := os.Link(filepath.Join(cached, f), filepath.Join(stage, f)); err != nil {
			return "", fmt.Errorf("reuse the packed root: %w", err)
		}
	}
	return strings.TrimSpace(string(release)), nil
}

// keepPacked links stage's packed files into the cache under key, through tmp (made whole, then
// renamed into place, durably: a key names a finished result only).
func keepPacked(stage, release, tmp, cached string) error {
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	for _, f := range packedFiles {
		if err := os.Link(filepath.Join(stage, f), filepath.Join(tmp, f)); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, releaseFile), []byte(release+"\n"), 0o644); err != nil {
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
