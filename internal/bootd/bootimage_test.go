package bootd

import (
	"testing"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/artifact/artifacttest"
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
				artifacttest.Publish(t, d.cfg.ImagesDir, "compute", v)
			}
			b := controller{d}.BootImage(tt.node)
			if b.Name != tt.image || b.Pinned != tt.pin || b.Version != tt.want || b.Dir != d.cfg.ImagesDir || (b.Problem == "") != (tt.want != "") {
				t.Fatalf("BootImage(%s) = %+v, want %s version %q in %s", tt.node, b, tt.image, tt.want, d.cfg.ImagesDir)
			}
		})
	}
}
