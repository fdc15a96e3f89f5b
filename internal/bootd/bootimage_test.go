package bootd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/artifact"
)

// TestBootImage: the answer to an assign says which version the node boots, or that its role
// has none yet and where bootd looks for one.
func TestBootImage(t *testing.T) {
	for _, tt := range []struct {
		name, node, image string
		pin               string   // compute.version
		built             []string // versions of image "compute" in the images directory
		want              string   // the version; "" = none, with a problem given
	}{
		{"none built", "c4", "compute", "", nil, ""},
		{"built", "c4", "compute", "", []string{"2026.11.20-1", "2026.11.21-1"}, "2026.11.21-1"},
		{"pinned", "c4", "compute", "2026.11.20-1", []string{"2026.11.20-1", "2026.11.21-1"}, "2026.11.20-1"},
		{"pinned, not built", "c4", "compute", "2026.11.19-1", []string{"2026.11.21-1"}, ""},
		{"another role's image", "master", "master", "", []string{"2026.11.21-1"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := testDaemon(t)
			d.cfg.ImagesDir = t.TempDir()
			d.cfg.Compute.Version = tt.pin
			d.images = artifact.NewCatalog(d.cfg.ImagesDir, d.log)
			for _, v := range tt.built {
				writeTestImage(t, d.cfg.ImagesDir, "compute", v)
			}
			b := controller{d}.BootImage(tt.node)
			if b.Name != tt.image || b.Pinned != tt.pin || b.Version != tt.want || b.Dir != d.cfg.ImagesDir || (b.Problem == "") != (tt.want != "") {
				t.Fatalf("BootImage(%s) = %+v, want %s version %q in %s", tt.node, b, tt.image, tt.want, d.cfg.ImagesDir)
			}
		})
	}
}

// writeTestImage publishes a small image version as imgbuild would.
func writeTestImage(t *testing.T, imagesDir, name, version string) {
	t.Helper()
	src := t.TempDir()
	for _, f := range []string{"vmlinuz", "initramfs.img"} {
		if err := os.WriteFile(filepath.Join(src, f), []byte(f+" of "+version), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	digest := "sha256:" + strings.Repeat("0", 64)
	m := artifact.Manifest{Name: name, Version: version, Created: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC),
		Kernel: artifact.Kernel{File: "vmlinuz", Release: "5.14.0-503.el9.x86_64"}, Initrds: []string{"initramfs.img"},
		Layers: []artifact.Layer{{Name: "base", Digest: digest}}, Lock: digest}
	if _, err := artifact.Write(imagesDir, m, src); err != nil {
		t.Fatal(err)
	}
}
