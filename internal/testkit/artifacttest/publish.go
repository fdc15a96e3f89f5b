// Package artifacttest publishes small image versions for the tests of packages that read them.
package artifacttest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/artifact"
)

// Publish writes version of image name into imagesDir as imgbuild would (a kernel and an
// initramfs, verified by their manifest) and returns the version's directory.
func Publish(t testing.TB, imagesDir, name, version string) string {
	t.Helper()
	src := t.TempDir()
	for _, f := range []string{"vmlinuz", "initramfs.img"} {
		if err := os.WriteFile(filepath.Join(src, f), []byte(f+" of "+version+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	digest := "sha256:" + strings.Repeat("0", 64)
	m := artifact.Manifest{Name: name, Version: version, Created: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC),
		Kernel: artifact.Kernel{File: "vmlinuz", Release: "5.14.0-503.el9.x86_64"}, Initrds: []string{"initramfs.img"},
		Layers: []artifact.Layer{{Name: "base", Digest: digest}}, Lock: digest}
	dir, err := artifact.Write(imagesDir, m, src)
	if err != nil {
		t.Fatalf("publish %s/%s: %v", name, version, err)
	}
	return dir
}
