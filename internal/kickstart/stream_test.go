package kickstart

import (
	"io"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
)

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

const bigFile = 64 << 20

// TestWriteStreamsFiles: a 64 MiB layer file goes into the kickstart, base64, while Write
// allocates a small part of its size (it used to take about seven times it).
func TestWriteStreamsFiles(t *testing.T) {
	big := File{Path: "/opt/big", Mode: 0o644, Owner: "root", Group: "root", Open: func() (io.ReadCloser, error) {
		return io.NopCloser(io.LimitReader(zeros{}, bigFile)), nil
	}}
	img := Image{Name: "t", Role: "compute", Repos: []Repo{{ID: "baseos", BaseURL: "file:///srv/baseos/"}},
		Layers: []Layer{{Name: "t", Packages: []Package{{Name: "t", Version: "1", Release: "1.el9", Arch: "noarch"}}, Files: []File{big}}}}
	var n countWriter
	var err error
	alloc := allocated(func() { err = Write(&n, img, os.DirFS("../../kickstart")) })
	t.Logf("Write allocated %d KiB for a %d MiB file", alloc>>10, bigFile>>20)
	if alloc > bigFile/16 {
		t.Errorf("Write allocated %d KiB for a %d MiB file", alloc>>10, bigFile>>20)
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(bigFile / 3 * 4 * 77 / 76); n < countWriter(want) {
		t.Errorf("wrote %d bytes, want at least the file's %d in base64 lines", n, want)
	}
}

// TestNodeReaderStreamsBody: bootd completes a large install.ks for a node reading a few
// kilobytes of it ahead, not the whole body.
func TestNodeReaderStreamsBody(t *testing.T) {
	body := io.MultiReader(strings.NewReader("# imgbuild kickstart: image compute\n# role: compute\n"), io.LimitReader(zeros{}, bigFile))
	n := NodeInfo{Name: "c1", Role: "compute", Address: netip.MustParseAddr("10.80.0.101"), Netmask: netip.MustParseAddr("255.255.255.0"),
		MAC: "52:54:00:12:34:56", BootdURL: "http://10.80.0.1"}
	var copied int64
	var err error
	alloc := allocated(func() {
		var r io.Reader
		if r, err = NodeReader(body, n, os.DirFS("../../kickstart")); err == nil {
			copied, err = io.Copy(io.Discard, r)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if alloc > bigFile/16 {
		t.Errorf("NodeReader allocated %d KiB for a %d MiB body", alloc>>10, bigFile>>20)
	}
	if copied < bigFile {
		t.Errorf("copied %d bytes, want the body's %d and more", copied, bigFile)
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }
