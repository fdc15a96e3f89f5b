package imgbuild

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/artifact"
)

// TestDropSuperseded: before packing a new root, the image's last packed root goes, unless
// another image's record names it, and nothing else does.
func TestDropSuperseded(t *testing.T) {
	key := func(c string) string { return strings.Repeat(c, 64) }
	cases := []struct {
		name      string
		records   map[string]string // image -> its record's packed key
		image     string
		newKey    string
		wantGone  []string
		wantStays []string
	}{
		{"the image's last packed root goes", map[string]string{"compute": key("a"), "master": key("b")}, "compute", key("c"), []string{key("a")}, []string{key("b")}},
		{"shared with another image: stays", map[string]string{"compute": key("a"), "master": key("a")}, "compute", key("c"), nil, []string{key("a")}},
		{"the same key: stays", map[string]string{"compute": key("a")}, "compute", key("a"), nil, []string{key("a")}},
		{"no record: nothing goes", map[string]string{"master": key("b")}, "compute", key("c"), nil, []string{key("b")}},
		{"a record naming a path: nothing goes", map[string]string{"compute": "../../etc"}, "compute", key("c"), nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			for image, k := range tc.records {
				if err := writeKept(cache, image, keptRecord{Packed: k}); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Join(packedDir(cache), k), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := dropSuperseded(cache, tc.image, tc.newKey); err != nil {
				t.Fatal(err)
			}
			for _, k := range tc.wantGone {
				if _, err := os.Stat(filepath.Join(packedDir(cache), k)); !os.IsNotExist(err) {
					t.Errorf("packed root %s…: %v, want it removed", k[:4], err)
				}
			}
			for _, k := range tc.wantStays {
				if _, err := os.Stat(filepath.Join(packedDir(cache), k)); err != nil {
					t.Errorf("packed root %s…: %v, want it kept", k[:4], err)
				}
			}
		})
	}
}

// TestPackedReuseChecked: a kept packed root is linked into a new stage while its files are what
// was recorded, and refused as changed once one of them (a hard link a version shares) is
// written in place.
func TestPackedReuseChecked(t *testing.T) {
	dir := t.TempDir()
	stage, cached := filepath.Join(dir, "stage"), filepath.Join(dir, "packed", strings.Repeat("d", 64))
	files := map[string]artifact.File{}
	for _, f := range packedFiles {
		data := []byte("the " + f)
		if err := os.MkdirAll(stage, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(stage, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
		files[f] = artifact.File{Size: int64(len(data)), SHA256: fmt.Sprintf("%x", sha256.Sum256(data))}
	}
	if err := keepPacked(stage, "6.1.0-1", files, filepath.Join(dir, "tmp"), cached); err != nil {
		t.Fatal(err)
	}
	release, _, err := linkPacked(cached, filepath.Join(dir, "again"))
	if err != nil || release != "6.1.0-1" {
		t.Fatalf("reuse: release %q, %v; want 6.1.0-1", release, err)
	}
	if err := os.WriteFile(filepath.Join(stage, "rootfs.squashfs"), []byte("the rootfs.squashfs, changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := linkPacked(cached, filepath.Join(dir, "third")); !errors.Is(err, errPackedChanged) {
		t.Fatalf("reuse after an in-place change: %v, want errPackedChanged", err)
	}
	if _, _, err := linkPacked(filepath.Join(dir, "packed", strings.Repeat("e", 64)), filepath.Join(dir, "fourth")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("reuse of no packed root: %v, want fs.ErrNotExist", err)
	}
}
