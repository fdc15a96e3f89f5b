package imgbuild

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/rootfs"
)

func hexName(c string) string { return strings.Repeat(c, 64) }

// TestPruneCache: after a build, the cache keeps the layer trees and packages of each image's
// last build, and what is not a cache entry (a build's scratch directory, a stray file), and
// removes the rest; an unreadable record stops it before it removes anything.
func TestPruneCache(t *testing.T) {
	mine, other, old := hexName("a"), hexName("b"), hexName("c")
	rpmMine, rpmOther, rpmOld := hexName("1"), hexName("2"), hexName("3")
	setup := func(t *testing.T) string {
		cache := t.TempDir()
		for _, p := range []string{
			"layers/" + mine + "/etc/motd", "layers/" + other + "/etc/motd", "layers/" + old + "/etc/motd",
			"layers/.build-nfs-123/tree/x", "layers/NOTES",
			"rpms/sha256/" + rpmMine + ".rpm", "rpms/sha256/" + rpmOther + ".rpm", "rpms/sha256/" + rpmOld + ".rpm", "rpms/sha256/.partial-123",
		} {
			writeFile(t, filepath.Join(cache, p), "x")
		}
		writeFile(t, filepath.Join(cache, "kept", "master.json"), `{"layers": ["`+other+`"], "rpms": ["`+rpmOther+`"]}`)
		return cache
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	t.Run("keeps what each image's last build used", func(t *testing.T) {
		cache := setup(t)
		images := t.TempDir()
		writeFile(t, filepath.Join(images, "compute.toml"), "x")
		if err := recordKept(cache, "compute", filepath.Join(images, "compute.toml"), []rootfs.Result{{Layer: "base", Key: mine}}, "", []string{rpmMine}); err != nil {
			t.Fatal(err)
		}
		if err := pruneCache(cache, images, log); err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string]bool{
			"layers/" + mine: true, "layers/" + other: true, "layers/" + old: false,
			"layers/.build-nfs-123": true, "layers/NOTES": true,
			"rpms/sha256/" + rpmMine + ".rpm": true, "rpms/sha256/" + rpmOther + ".rpm": true, "rpms/sha256/" + rpmOld + ".rpm": false,
			"rpms/sha256/.partial-123": true, "kept/compute.json": true,
		} {
			if _, err := os.Stat(filepath.Join(cache, p)); (err == nil) != want {
				t.Errorf("%s: present %v, want %v", p, err == nil, want)
			}
		}
		if left, _ := filepath.Glob(filepath.Join(cache, "layers", ".build-pruned-*")); len(left) > 0 {
			t.Errorf("removed trees left behind: %v", left)
		}
	})
	t.Run("an unreadable record stops it", func(t *testing.T) {
		cache := setup(t)
		writeFile(t, filepath.Join(cache, "kept", "master.json"), "{not json")
		err := pruneCache(cache, t.TempDir(), log)
		if err == nil || !strings.Contains(err.Error(), "master.json") {
			t.Fatalf("err = %v, want one naming the record", err)
		}
		if _, err := os.Stat(filepath.Join(cache, "layers", old)); err != nil {
			t.Error("a layer tree was removed although a record could not be read")
		}
	})
}

// TestPruneRemovedImages: a build drops the records of the images whose files are gone from its
// images directory, so what only they used goes; records it cannot place stay.
func TestPruneRemovedImages(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	images, elsewhere := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(images, "compute.toml"), "x")
	for _, tc := range []struct {
		name, imageFile string
		kept            bool
	}{
		{"the image being built", filepath.Join(images, "compute.toml"), true},
		{"an image removed from the images directory", filepath.Join(images, "gpu.toml"), false},
		{"an image of another directory, gone", filepath.Join(elsewhere, "gone.toml"), true},
		{"a record of an older imgbuild, without its file", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			key := hexName("d")
			writeFile(t, filepath.Join(cache, "layers", key, "etc/motd"), "x")
			if err := recordKept(cache, "compute", filepath.Join(images, "compute.toml"), nil, "", nil); err != nil {
				t.Fatal(err)
			}
			if err := recordKept(cache, "other", tc.imageFile, []rootfs.Result{{Layer: "base", Key: key}}, "", nil); err != nil {
				t.Fatal(err)
			}
			if err := pruneCache(cache, images, log); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"kept/other.json", "layers/" + key} {
				if _, err := os.Stat(filepath.Join(cache, p)); (err == nil) != tc.kept {
					t.Errorf("%s: present %v, want %v", p, err == nil, tc.kept)
				}
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
