package artifact

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/labcluster/gpucluster/internal/atomicfile"
	"github.com/labcluster/gpucluster/internal/testkit/golden"
	"github.com/labcluster/gpucluster/internal/testkit/testhook"
)

func TestWriteRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Manifest)
	}{
		{"with rootfs", func(*Manifest) {}},
		{"kernel and initrds only", func(m *Manifest) {
			m.Rootfs = nil
			m.Initrds = []string{"initramfs.img", "rootfs.squashfs"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			images := t.TempDir()
			m := testManifest("compute", "2026.11.21-1")
			tt.change(&m)
			dir := writeImage(t, images, m)
			if want := filepath.Join(images, "compute", "2026.11.21-1"); dir != want {
				t.Fatalf("Write dir = %s, want %s", dir, want)
			}
			img, err := Open(dir)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if err := img.Verify(); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if got, want := img.Manifest.Referenced(), m.Referenced(); !reflect.DeepEqual(got, want) {
				t.Fatalf("Referenced() = %v, want %v", got, want)
			}
			if len(img.Manifest.Files) != len(m.Referenced()) {
				t.Fatalf("Files = %v, want one entry per referenced file", img.Manifest.Files)
			}
			assertNoTemp(t, filepath.Join(images, "compute"))
		})
	}
}

// TestWriteIgnoresUmask: under an admin's umask 077 a version is still readable by a server
// that does not run as imgbuild's user: 0755 directories, 0644 files, down from the directories
// Write created above it. An images directory that exists keeps its mode. Not parallel: the
// umask is the process's.
func TestWriteIgnoresUmask(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o077))
	root := t.TempDir()
	existing := filepath.Join(root, "existing")
	if err := os.Mkdir(existing, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(existing, 0o750); err != nil {
		t.Fatal(err)
	}
	writeImage(t, existing, testManifest("compute", "1"))
	made := filepath.Join(root, "made", "images")
	writeImage(t, made, testManifest("compute", "1"))
	want := map[string]fs.FileMode{
		"existing": fs.ModeDir | 0o750, "existing/compute": fs.ModeDir | 0o755, "existing/compute/1": fs.ModeDir | 0o755,
		"made": fs.ModeDir | 0o755, "made/images": fs.ModeDir | 0o755, "made/images/compute": fs.ModeDir | 0o755,
		"made/images/compute/1": fs.ModeDir | 0o755,
	}
	for _, dir := range []string{"existing/compute/1", "made/images/compute/1"} {
		for _, f := range []string{ManifestFile, "vmlinuz", "initramfs.img", "rootfs.squashfs"} {
			want[dir+"/"+f] = 0o644
		}
	}
	for _, p := range slices.Sorted(maps.Keys(want)) {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want[p] {
			t.Errorf("%s: %v, want %v", p, fi.Mode(), want[p])
		}
	}
}

// Every directory entry a published version depends on is synced: the parent of each
// directory Write made, and of the first it found (another writer may have just made it), the
// filled temporary directory, and the directory it was renamed into. A crash after Write returns
// loses none of them.
func TestWriteSyncsWhatItMade(t *testing.T) {
	root := t.TempDir()
	images := filepath.Join(root, "made", "images")
	tests := []struct {
		name, version string
		want          []string // relative to root; <tmp> is the version's temporary directory
	}{
		{"into a new images directory", "1",
			[]string{".", "made", "made/images", "<tmp>", "made/images/compute"}},
		{"beside a version", "2",
			[]string{"made/images", "<tmp>", "made/images/compute"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var synced []string
			testhook.Set(t, &syncDir, func(dir string) error {
				rel, err := filepath.Rel(root, dir)
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(filepath.Base(rel), "."+tt.version+tmpInfix) {
					rel = "<tmp>"
				}
				synced = append(synced, rel)
				return atomicfile.SyncDir(dir)
			})
			writeImage(t, images, testManifest("compute", tt.version))
			if !slices.Equal(synced, tt.want) {
				t.Errorf("synced %q, want %q", synced, tt.want)
			}
		})
	}
}

func TestWriteGolden(t *testing.T) {
	dir := writeImage(t, t.TempDir(), testManifest("compute", "2026.11.21-1"))
	got, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "manifest.golden.json"), got)
}

func TestWriteRefuses(t *testing.T) {
	tests := []struct {
		name    string
		version string
		files   map[string]string
		wantErr error  // checked with errors.Is when set
		want    string // substring of the error
	}{
		{"existing version", "2026.11.21-1", bootFiles, ErrExists, "already exists"},
		{"dot-dot version", "..", bootFiles, nil, "starts with '.'"},
		{"hidden version", ".tmp", bootFiles, nil, "starts with '.'"},
		{"slash version", "1/2", bootFiles, nil, "outside"},
		{"absolute version", "/tmp/x", bootFiles, nil, "outside"},
		{"empty version", "", bootFiles, nil, "version is missing"},
		{"missing file", "2", map[string]string{"vmlinuz": "k", "initramfs.img": "i"}, nil, "rootfs.squashfs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			images := t.TempDir()
			writeImage(t, images, testManifest("compute", "2026.11.21-1"))
			_, err := Write(images, testManifest("compute", tt.version), srcDir(t, tt.files))
			if err == nil {
				t.Fatal("Write succeeded, want an error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Write error %v, want errors.Is %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Write error %q, want it to contain %q", err, tt.want)
			}
			assertNoTemp(t, filepath.Join(images, "compute"))
			if _, err := Open(filepath.Join(images, "compute", "2026.11.21-1")); err != nil {
				t.Fatalf("existing version damaged: %v", err)
			}
		})
	}
}

func TestWriteRefusesBadNames(t *testing.T) {
	for _, name := range []string{"..", "a/b", "/abs", ""} {
		t.Run(name, func(t *testing.T) {
			images := t.TempDir()
			if _, err := Write(images, testManifest(name, "1"), srcDir(t, bootFiles)); err == nil {
				t.Fatalf("Write with name %q succeeded", name)
			}
			if des, _ := os.ReadDir(images); len(des) != 0 {
				t.Fatalf("Write left %d entries in the images dir", len(des))
			}
		})
	}
}

func TestWriteRefusesDirectoryAsFile(t *testing.T) {
	src := srcDir(t, map[string]string{"vmlinuz": "k", "initramfs.img": "i"})
	if err := os.Mkdir(filepath.Join(src, "rootfs.squashfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	images := t.TempDir()
	if _, err := Write(images, testManifest("compute", "1"), src); err == nil {
		t.Fatal("Write copied a directory as a file")
	}
	assertNoTemp(t, filepath.Join(images, "compute"))
}

// assertNoTemp fails if a hidden temp directory was left behind.
func assertNoTemp(t *testing.T, nameDir string) {
	t.Helper()
	des, err := os.ReadDir(nameDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".") {
			t.Fatalf("temp dir %s left behind", de.Name())
		}
	}
}
