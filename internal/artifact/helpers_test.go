package artifact

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// created is the fixed build time of test images, so manifests are stable.
var created = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// bootFiles is the content of a small test image.
var bootFiles = map[string]string{
	"vmlinuz":         "kernel bytes\n",
	"initramfs.img":   "initrd bytes\n",
	"rootfs.squashfs": "rootfs bytes\n",
}

func testManifest(name, version string) Manifest {
	return Manifest{
		Name:    name,
		Version: version,
		Created: created,
		Kernel:  Kernel{File: "vmlinuz", Release: "5.14.0-503.el9.x86_64"},
		Initrds: []string{"initramfs.img"},
		Rootfs:  &Rootfs{File: "rootfs.squashfs", Format: "squashfs"},
		Cmdline: "console=ttyS0",
		Layers:  []Layer{{Name: "base", Digest: "sha256:" + emptySHA256}},
		Lock:    "sha256:" + emptySHA256,
	}
}

// srcDir writes files into a fresh directory and returns it.
func srcDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// writeImage publishes a test image and returns its directory.
func writeImage(t *testing.T, imagesDir string, m Manifest) string {
	t.Helper()
	dir, err := Write(imagesDir, m, srcDir(t, bootFiles))
	if err != nil {
		t.Fatalf("Write(%s/%s): %v", m.Name, m.Version, err)
	}
	return dir
}

// replaceFile swaps a file for one with new content through a rename, the way
// cp --remove-destination or rsync would: a new inode.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// overwriteInPlace rewrites a file keeping its inode, then moves its mtime
// forward: on Linux file times are only jiffy-granular, and a real tamperer
// does not write in the same few milliseconds as the verification.
func overwriteInPlace(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
}
