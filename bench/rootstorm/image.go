package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/folbricht/desync"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/castr"
	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// images are the two versions: v1, and v2 with one layer's files added.
type images struct {
	dir            string // bootd's images directory
	v1, v2         version
	changed        int64 // bytes of v2's chunks that v1 lacks
	v2Published    bool
	stage1, stage2 string
}

type version struct {
	name, file, index, sha string
	size                   int64
	idx                    desync.Index
}

// buildImages writes a tree of random files (squashfs blocks hold compressed data, which chunks
// as random data does), packs it with mksquashfs as v1, adds the layer's files in a directory of
// their own (the middle of the image: squashfs orders by name) and packs v2. v1 is published
// now; v2 before the update.
func buildImages(ctx context.Context, o options) (*images, error) {
	im := &images{dir: filepath.Join(o.work, "images")}
	tree := filepath.Join(o.work, "tree")
	r := rand.New(rand.NewChaCha8([32]byte{1}))
	if err := writeFiles(filepath.Join(tree, "usr"), int64(o.sizeMiB)<<20, r); err != nil {
		return nil, err
	}
	im.stage1, im.stage2 = filepath.Join(o.work, "stage1"), filepath.Join(o.work, "stage2")
	var err error
	if im.v1, err = pack(ctx, tree, im.stage1, "1"); err != nil {
		return nil, err
	}
	if err := writeFiles(filepath.Join(tree, "opt", "layer"), int64(o.layerMiB)<<20, r); err != nil {
		return nil, err
	}
	if im.v2, err = pack(ctx, tree, im.stage2, "2"); err != nil {
		return nil, err
	}
	if err := publish(im.dir, im.stage1, "1"); err != nil {
		return nil, err
	}
	im.v1.file, im.v1.index = filepath.Join(im.dir, "compute", "1", "rootfs.squashfs"), filepath.Join(im.dir, "compute", "1", castr.IndexFile)
	if im.v1.idx, err = castr.ReadIndex(im.v1.index); err != nil {
		return nil, err
	}
	// What a node holding v1 lacks of v2: chunked into a scratch store, compared.
	scratch := filepath.Join(o.work, "scratch")
	if _, err := castr.Chunk(ctx, im.v2.file, scratch, filepath.Join(o.work, "v2.caibx")); err != nil {
		return nil, err
	}
	if im.v2.idx, err = castr.ReadIndex(filepath.Join(o.work, "v2.caibx")); err != nil {
		return nil, err
	}
	os.RemoveAll(scratch)
	im.changed = changedBytes(im.v1.idx, im.v2.idx)
	return im, nil
}

// writeFiles writes total bytes of random files under dir, 256 KiB to 4 MiB each.
func writeFiles(dir string, total int64, r *rand.Rand) error {
	for i := 0; total > 0; i++ {
		size := min(total, int64(256<<10+r.IntN(4<<20-256<<10)))
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i%64))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return err
		}
		b := make([]byte, size)
		for j := 0; j+8 <= len(b); j += 8 {
			v := r.Uint64()
			for k := 0; k < 8; k++ {
				b[j+k] = byte(v >> (8 * k))
			}
		}
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d", i)), b, 0o644); err != nil {
			return err
		}
		total -= size
	}
	return nil
}

// pack makes the version's stage: the squashfs (reproducible: fixed times, root owner) and the
// files a version lists.
func pack(ctx context.Context, tree, stage, v string) (version, error) {
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return version{}, err
	}
	sq := filepath.Join(stage, "rootfs.squashfs")
	cmd := exec.CommandContext(ctx, "mksquashfs", tree, sq, "-noappend", "-quiet", "-no-progress", "-all-root",
		"-mkfs-time", "0", "-all-time", "0", "-comp", "zstd", "-Xcompression-level", "3")
	if out, err := cmd.CombinedOutput(); err != nil {
		return version{}, fmt.Errorf("mksquashfs: %v: %s", err, out)
	}
	for _, f := range []string{"vmlinuz", "initramfs.img"} {
		if err := os.WriteFile(filepath.Join(stage, f), []byte(f+" (not booted: the storm fetches roots)\n"), 0o644); err != nil {
			return version{}, err
		}
	}
	sum, err := sha256hex.File(sq)
	if err != nil {
		return version{}, err
	}
	fi, err := os.Stat(sq)
	if err != nil {
		return version{}, err
	}
	return version{name: v, file: sq, sha: sum, size: fi.Size()}, nil
}

// publish chunks the stage's root into the images directory's store and writes the version, as
// imgbuild does.
func publish(imagesDir, stage, v string) error {
	unlock, _, err := castr.Lock(imagesDir, false)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := castr.Chunk(context.Background(), filepath.Join(stage, "rootfs.squashfs"), imagesDir, filepath.Join(stage, castr.IndexFile)); err != nil {
		return err
	}
	m := artifact.Manifest{Name: "compute", Version: v, Created: time.Unix(0, 0).UTC(),
		Kernel: artifact.Kernel{File: "vmlinuz", Release: "storm"}, Initrds: []string{"initramfs.img"},
		Rootfs: &artifact.Rootfs{File: "rootfs.squashfs", Format: "squashfs", Index: castr.IndexFile},
		Layers: []artifact.Layer{{Name: "storm", Digest: "none"}}, Lock: "none"}
	_, err = artifact.Write(imagesDir, m, stage)
	return err
}

// changedBytes is the size of next's distinct chunks that prev lacks.
func changedBytes(prev, next desync.Index) int64 {
	have := map[desync.ChunkID]bool{}
	for _, c := range prev.Chunks {
		have[c.ID] = true
	}
	var n int64
	for _, c := range next.Chunks {
		if !have[c.ID] {
			n += int64(c.Size)
			have[c.ID] = true
		}
	}
	return n
}
