package bootd

import (
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/artifact"
)

// TestKickstartStreamsTheImagesBody: a node's kickstart is its own part around the image's
// install.ks, streamed from the verified file; another address gets nothing.
func TestKickstartStreamsTheImagesBody(t *testing.T) {
	d := testDaemon(t)
	d.server = netip.MustParseAddr("10.80.0.1")
	d.cfg.ImagesDir = t.TempDir()
	d.images = artifact.NewCatalog(d.cfg.ImagesDir, d.log)
	src := t.TempDir()
	body := "# imgbuild kickstart: image compute\n# role: compute\n" + strings.Repeat("# a layer file, base64\n", 50000)
	for name, data := range map[string]string{"vmlinuz": "k", "initramfs.img": "i", "install.ks": body} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	digest := "sha256:" + strings.Repeat("0", 64)
	m := artifact.Manifest{Name: "compute", Version: "1", Created: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC),
		Kernel: artifact.Kernel{File: "vmlinuz", Release: "5.14.0-503.el9.x86_64"}, Initrds: []string{"initramfs.img"},
		Layers: []artifact.Layer{{Name: "base", Digest: digest}}, Lock: digest, Extras: []string{"install.ks"}}
	if _, err := artifact.Write(d.cfg.ImagesDir, m, src); err != nil {
		t.Fatal(err)
	}
	if err := assignC1(t, d, machineA, false); err != nil {
		t.Fatal(err)
	}
	name, ks, err := nodes{d}.Kickstart(netip.MustParseAddr("10.80.0.101"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(ks)
	if cerr := ks.Close(); err == nil {
		err = cerr
	}
	if err != nil || name != "c1" {
		t.Fatalf("kickstart of %q: %v", name, err)
	}
	got := string(b)
	for _, want := range []string{"--hostname=c1", body, "grubby --update-kernel=ALL"} {
		if !strings.Contains(got, want) {
			t.Errorf("kickstart lacks %.60q", want)
		}
	}
	if _, _, err := (nodes{d}).Kickstart(netip.MustParseAddr("10.80.0.150")); err == nil {
		t.Error("an address of no node got a kickstart")
	}
}
