package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A layer is stored as what it adds to the layers below it, as container builders store theirs:
// the upper directory of an overlayfs mount whose lower directories are the layers below, top
// first. Nothing below is copied: a layer that changes a file gets a copy of that file only
// (overlayfs's copy-up), a removal is a whiteout, a directory replaced is marked opaque. The
// first layer has nothing below it and is a plain tree.
//
// The options, the same for every mount so that every layer is read as it was written:
//   - index=on: a hard-linked file changed through one of its names stays one inode under all
//     its names (without it, overlayfs splits the link at copy-up, and the other names keep the
//     old file: not what cp -a and an in-place change gave);
//   - redirect_dir=on: a directory renamed in an upper layer is recorded as a redirect, not
//     refused with EXDEV;
//   - metacopy=on for the merged view that is normalized and packed only (Mount): clamping a
//     time or sorting xattrs copies up the metadata, not gigabytes of CUDA libraries. Layer
//     stores never hold metacopy files, so each diff holds the data it changed.
const (
	layerOptions  = "index=on,redirect_dir=on"
	mergedOptions = "index=on,redirect_dir=on,metacopy=on"
)

// mountOverlay mounts lowers (top first) with upper and work (empty directories on the file
// system of the lowers) at dir. The merged root takes its owner, mode and times from the upper
// directory, so upper gets those of root (the top layer's root): the image's / is what the
// layers made it, not what this scratch directory was created with.
func mountOverlay(lowers []string, root, upper, work, dir, options string) error {
	for _, d := range []string{upper, work, dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := copyAttrs(root, upper); err != nil {
		return err
	}
	for _, l := range lowers {
		if strings.ContainsAny(l, ",:\\") {
			return fmt.Errorf("layer directory %s: overlayfs cannot take a path with ',', ':' or '\\'", l)
		}
	}
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,%s", strings.Join(lowers, ":"), upper, work, options)
	if len(data) >= os.Getpagesize() {
		return fmt.Errorf("overlay of %d layers: mount options of %d bytes, the kernel takes fewer than %d (a shorter --cache path helps)", len(lowers), len(data), os.Getpagesize())
	}
	if err := unix.Mount("overlay", dir, "overlay", 0, data); err != nil {
		return fmt.Errorf("mount the layers below as overlayfs at %s: %w (needs root and a kernel with overlayfs)", dir, err)
	}
	return nil
}

// copyAttrs gives dst the owner, mode and times of src (directories both).
func copyAttrs(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: src, Err: err}
	}
	if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
		return &fs.PathError{Op: "chmod", Path: dst, Err: err}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "utimes", Path: dst, Err: err}
	}
	return nil
}

// unmount detaches dir, which stops nothing a killed build's scratch still holds.
func unmount(dir string) error {
	if err := unix.Unmount(dir, 0); err != nil {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}

// lowerDirs are the layer directories below a layer, top first: the order overlayfs takes.
func (b *Builder) lowerDirs(keys []string) []string {
	dirs := make([]string, len(keys))
	for i, k := range keys {
		dirs[len(keys)-1-i] = b.layerDir(k)
	}
	return dirs
}

func (b *Builder) layerDir(key string) string { return filepath.Join(b.CacheDir, "layers", key) }

// Merged is the merged view of a built image, mounted writable: Normalize and the packers work
// on Dir; what they change goes to a scratch upper directory, never to the cached layers.
type Merged struct {
	Dir     string
	scratch string
}

// Mount mounts the merged view of the layers of results (bottom first, as Build returns them)
// at scratch/merged, with its upper and work directories under scratch (on the cache's file
// system: overlayfs wants them there). Unmount it, then remove scratch.
func (b *Builder) Mount(results []Result, scratch string) (*Merged, error) {
	if len(results) == 0 {
		return nil, errors.New("no layers to mount")
	}
	keys := make([]string, len(results))
	for i, r := range results {
		keys[i] = r.Key
	}
	m := &Merged{Dir: filepath.Join(scratch, "merged"), scratch: scratch}
	lowers := b.lowerDirs(keys)
	top := lowers[0]
	if len(lowers) == 1 {
		// overlayfs wants two layers when one is writable; give it an empty one on top, so the
		// view of a single layer is mounted (and protected) like any other.
		empty := filepath.Join(scratch, "empty")
		if err := os.MkdirAll(empty, 0o755); err != nil {
			return nil, err
		}
		lowers = append([]string{empty}, lowers...)
	}
	err := mountOverlay(lowers, top, filepath.Join(scratch, "upper"), filepath.Join(scratch, "work"), m.Dir, mergedOptions)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Unmount detaches the merged view; the scratch directory is the caller's to remove.
func (m *Merged) Unmount() error { return unmount(m.Dir) }

// linkUpAliases keeps hard links whole across layers. With index=on, a lower hard-linked file
// changed through one name is one inode under all its names while the layer is mounted, but the
// layer's upper directory holds only the names that were copied up: the next layer would see the
// others as the old file. So before a layer is stored, every other name of such a file is
// copied up too (for a linked file, a link to the index, not a copy of its data).
func linkUpAliases(upper, merged string) error {
	inos, err := copiedUpLinks(upper, merged)
	if err != nil || len(inos) == 0 {
		return err
	}
	return filepath.WalkDir(merged, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if !inos[st.Ino] {
			return nil
		}
		rel, err := filepath.Rel(merged, p)
		if err != nil {
			return err
		}
		if _, err := os.Lstat(filepath.Join(upper, rel)); err == nil {
			return nil // already in the layer
		}
		// A change of owner to the owner it has copies the name up and changes nothing else.
		return os.Lchown(p, int(st.Uid), int(st.Gid))
	})
}

// copiedUpLinks are the inode numbers, as the merged view shows them (a copied-up file keeps
// its lower origin's on one file system), of the upper files with more than one link: files
// copied up from a lower hard-linked file (the index holds a link too), or linked in this layer.
func copiedUpLinks(upper, merged string) (map[uint64]bool, error) {
	inos := map[uint64]bool{}
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil || st.Nlink < 2 {
			return err
		}
		rel, err := filepath.Rel(upper, p)
		if err != nil {
			return err
		}
		if err := unix.Lstat(filepath.Join(merged, rel), &st); err != nil {
			return err
		}
		inos[st.Ino] = true
		return nil
	})
	return inos, err
}
