package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/spec"
	"github.com/labcluster/gpucluster/internal/testkit/sandboxtest"
)

// TestCommandsAreSandboxed: a layer whose command tries an escape fails with the command, its
// output and the sandbox's limits in the error, and the host shows nothing of it.
func TestCommandsAreSandboxed(t *testing.T) {
	requireRoot(t)
	base, _, baseRPMs, _ := testLayers(t)
	for _, e := range sandboxtest.Escapes(t) {
		t.Run(e.Name, func(t *testing.T) {
			top := &spec.Layer{Name: "escape", Digest: "d-escape", Run: []spec.Command{{Command: e.Command, Description: e.Name}}}
			b := newBuilder(t, &fakeInstall{})
			_, err := b.Build(context.Background(), []Step{{Layer: base, RPMs: baseRPMs}, {Layer: top}})
			if err == nil {
				t.Fatal("the layer built: the escape worked")
			}
			for _, want := range []string{"layer escape: run[0]", "in the build sandbox", "docs/IMGBUILD.md"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			e.Held(t)
		})
	}
}

// TestCommandNetwork: network = true gives a command the host's network, and only then.
func TestCommandNetwork(t *testing.T) {
	requireRoot(t)
	base, _, baseRPMs, _ := testLayers(t)
	url := sandboxtest.Listen(t)
	for _, network := range []bool{false, true} {
		top := &spec.Layer{Name: "fetch", Digest: "d-fetch", Run: []spec.Command{{Command: "busybox wget -q -O /fetched " + url, Network: network}}}
		_, err := newBuilder(t, &fakeInstall{}).Build(context.Background(), []Step{{Layer: base, RPMs: baseRPMs}, {Layer: top}})
		if (err == nil) != network {
			t.Errorf("network = %v: build error %v", network, err)
		}
	}
}

// TestAccountFilesStayInTree: users and groups are written into the tree's own account files,
// never through a symlink, and a path out of the tree is an error that leaves the host as it was.
func TestAccountFilesStayInTree(t *testing.T) {
	host := t.TempDir()
	hostFile := filepath.Join(host, "profile.sh")
	if err := os.WriteFile(hostFile, []byte("# sourced by a shell\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	user := &spec.Layer{Name: "munge", Groups: []spec.Group{{Name: "munge", GID: 900}},
		Users: []spec.User{{Name: "munge", UID: 900, GID: 900, Home: "/var/lib/munge", Shell: "/sbin/nologin"}}}
	for _, tc := range []struct {
		name  string
		setup []string // as buildTree takes them
		want  string
	}{
		{"passwd links to a host file", []string{"etc/group", "etc/passwd->" + hostFile}, "/etc/passwd is a symlink (to " + hostFile + ")"},
		{"group links to a host file", []string{"etc/group->" + hostFile}, "/etc/group is a symlink"},
		{"group links inside the image", []string{"usr/share/group", "etc/group->../usr/share/group"}, "/etc/group is a symlink (to ../usr/share/group)"},
		{"shadow links to a host file", []string{"etc/group", "etc/passwd", "etc/gshadow", "etc/shadow->" + hostFile}, "/etc/shadow is a symlink"},
		{"etc links to the host's directory", []string{"etc->" + host}, "/etc/group"},
		{"passwd is a directory", []string{"etc/group", "etc/passwd/"}, "/etc/passwd is not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := buildTree(t, tc.setup)
			err := ensureAccounts(tree, user)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
			if b, _ := os.ReadFile(hostFile); string(b) != "# sourced by a shell\n" {
				t.Errorf("the host file changed: %q", b)
			}
			if entries, _ := os.ReadDir(host); len(entries) != 1 {
				t.Errorf("files appeared in the host directory: %v", entries)
			}
		})
	}
	t.Run("plain files are appended to", func(t *testing.T) {
		tree := buildTree(t, []string{"etc/group", "etc/passwd"})
		if err := ensureAccounts(tree, user); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(tree, "etc/passwd")); !strings.Contains(string(b), "munge:x:900:900::/var/lib/munge:/sbin/nologin\n") {
			t.Errorf("/etc/passwd = %q", b)
		}
	})
}

// TestLargeFileStreams: writing a layer file allocates far less than the file's size: the bytes
// stream from the source to the tree.
func TestLargeFileStreams(t *testing.T) {
	requireRoot(t) // chown
	layers, tree := t.TempDir(), t.TempDir()
	writeTestFile(t, filepath.Join(tree, "etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")
	writeTestFile(t, filepath.Join(tree, "etc/group"), "root:x:0:\n")
	const size = 64 << 20
	src := filepath.Join(layers, "big")
	if err := os.WriteFile(src, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	l := writeLayer(t, layers, "[[files]]\npath = \"/opt/big\"\nsource = \"big\"")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := writeFiles(tree, l.Files); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("writing a %d MiB file allocated %d KiB", size>>20, alloc>>10)
	if alloc > size/16 {
		t.Errorf("writing a %d MiB file allocated %d KiB", size>>20, alloc>>10)
	}
	if fi, err := os.Stat(filepath.Join(tree, "opt/big")); err != nil || fi.Size() != size {
		t.Errorf("written: %v, %v", fi, err)
	}
}

// writeLayer loads a layer file holding body from dir (its sources relative to dir).
func writeLayer(t *testing.T, dir, body string) *spec.Layer {
	t.Helper()
	p := filepath.Join(dir, "l.toml")
	if err := os.WriteFile(p, []byte("name = \"l\"\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := spec.LoadLayer(p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestOnlyTheOverlayMounted: while a layer is built over the layers below (packages installed,
// commands run), the host's mount table holds the layer's overlayfs mount under the cache and
// nothing else there: no /proc or /dev in the tree as the host sees it, as there was before the
// sandbox.
func TestOnlyTheOverlayMounted(t *testing.T) {
	requireRoot(t)
	base, top, baseRPMs, topRPMs := testLayers(t)
	b := newBuilder(t, &fakeInstall{})
	var seen []string
	install := b.Install
	b.Install = func(ctx context.Context, root string, rpms []string) error {
		points, err := mountPoints()
		if err != nil {
			return err
		}
		for _, p := range points {
			if strings.HasPrefix(p, b.CacheDir+"/") {
				seen = append(seen, strings.TrimPrefix(p, b.CacheDir+"/"))
			}
		}
		return install(ctx, root, rpms)
	}
	if _, err := b.Build(context.Background(), []Step{{Layer: base, RPMs: baseRPMs}, {Layer: top, RPMs: topRPMs}}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || !strings.HasPrefix(seen[0], "layers/.build-munge-") || !strings.HasSuffix(seen[0], "/merged") {
		t.Errorf("mounted under the cache while the layers were built: %q, want the munge layer's overlay only", seen)
	}
}
