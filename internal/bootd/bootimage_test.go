package bootd

import (
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/testkit/artifacttest"
	"github.com/labcluster/gpucluster/internal/testkit/testhook"
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

// An assign's answer does not wait for a long verification (a new multi-GB version): it says
// bootd is still verifying, and the verification goes on.
func TestBootImageDoesNotWaitForALongVerification(t *testing.T) {
	d := testDaemon(t)
	release, finished := make(chan struct{}), make(chan struct{})
	testhook.Set(t, &bootImageWait, 20*time.Millisecond)
	testhook.Set(t, &resolveImage, func(*artifact.Catalog, string, string) (*artifact.Image, error) {
		defer close(finished)
		<-release
		return &artifact.Image{Manifest: artifact.Manifest{Version: "2026.11.21-1"}}, nil
	})
	b := controller{d}.BootImage("c4")
	if !b.Verifying || b.Version != "" || b.Problem != "" || b.Name != "compute" {
		t.Fatalf("BootImage during a long verification = %+v, want verifying compute", b)
	}
	close(release)
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("the verification did not go on after the answer")
	}
}
