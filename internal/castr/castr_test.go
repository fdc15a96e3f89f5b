package castr

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/artifact"
)

// payload is n bytes that chunk like an image: random, so no two regions share chunks.
func payload(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// publishVersion writes a version whose root is root, chunked as imgbuild does.
func publishVersion(t *testing.T, images, version string, root []byte) Stats {
	t.Helper()
	src := t.TempDir()
	for name, data := range map[string][]byte{"vmlinuz": []byte("k"), "initramfs.img": []byte("i"), "rootfs.squashfs": root} {
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := Chunk(context.Background(), filepath.Join(src, "rootfs.squashfs"), images, filepath.Join(src, IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	m := artifact.Manifest{Name: "compute", Version: version, Created: time.Unix(1, 0),
		Kernel: artifact.Kernel{File: "vmlinuz", Release: "r"}, Initrds: []string{"initramfs.img"},
		Rootfs: &artifact.Rootfs{File: "rootfs.squashfs", Format: "squashfs", Index: IndexFile}, Lock: "sha256:x"}
	if _, err := artifact.Write(images, m, src); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestChunkSharesAndPrunes(t *testing.T) {
	images := t.TempDir()
	v1 := payload(1, 8<<20)
	// v2: 1 MiB inserted in the middle, as a layer's new files shift the image's tail.
	v2 := append(append(append([]byte{}, v1[:4<<20]...), payload(2, 1<<20)...), v1[4<<20:]...)

	st1 := publishVersion(t, images, "1", v1)
	if st1.NewChunks != st1.Chunks || st1.Size != int64(len(v1)) {
		t.Errorf("first version: %+v, want every chunk new and size %d", st1, len(v1))
	}
	st2 := publishVersion(t, images, "2", v2)
	t.Logf("v1 %+v; v2 %+v", st1, st2)
	// New bytes: the inserted MiB plus the chunks its two edges cut (at most 2 × MaxSize).
	if st2.NewBytes < 1<<20 || st2.NewBytes > 1<<20+2*MaxSize {
		t.Errorf("second version stored %d new bytes, want the inserted 1 MiB and at most its two edge chunks", st2.NewBytes)
	}

	t.Run("index is reproducible", func(t *testing.T) {
		other := t.TempDir()
		idx := filepath.Join(t.TempDir(), "again.caibx")
		src := filepath.Join(t.TempDir(), "root")
		if err := os.WriteFile(src, v2, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Chunk(context.Background(), src, other, idx); err != nil {
			t.Fatal(err)
		}
		a, _ := os.ReadFile(idx)
		b, _ := os.ReadFile(filepath.Join(images, "compute", "2", IndexFile))
		if !bytes.Equal(a, b) {
			t.Error("the same root chunked into another store gave another index")
		}
	})

	t.Run("prune keeps what versions reference", func(t *testing.T) {
		p, ok, err := Prune(context.Background(), images)
		if err != nil || !ok {
			t.Fatalf("prune: ok %v, %v", ok, err)
		}
		if p.Removed != 0 || p.Indexes != 2 {
			t.Errorf("prune with both versions: %+v, want nothing removed of 2 indexes", p)
		}
		if err := os.RemoveAll(filepath.Join(images, "compute", "1")); err != nil {
			t.Fatal(err)
		}
		p, _, err = Prune(context.Background(), images)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := ReadIndex(filepath.Join(images, "compute", "2", IndexFile))
		if err != nil {
			t.Fatal(err)
		}
		if p.Removed == 0 || p.Chunks-p.Removed != p.Kept {
			t.Errorf("prune after removing version 1: %+v, want its own chunks removed", p)
		}
		for _, c := range idx.Chunks {
			id := c.ID.String()
			if _, err := os.Stat(filepath.Join(StorePath(images), id[:4], id)); err != nil {
				t.Fatalf("chunk of version 2 pruned: %v", err)
			}
		}
	})

	t.Run("prune waits for no build", func(t *testing.T) {
		unlock, _, err := Lock(images, false)
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		if _, ok, err := Prune(context.Background(), images); ok || err != nil {
			t.Errorf("prune while a build holds the store: ok %v, %v; want skipped", ok, err)
		}
	})
}
