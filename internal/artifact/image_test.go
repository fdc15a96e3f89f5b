package artifact

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenRefuses(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, dir string) string // returns the dir to Open
		want string
	}{
		{"missing manifest", func(t *testing.T, dir string) string {
			os.Remove(filepath.Join(dir, ManifestFile))
			return dir
		}, "no such file"},
		{"not json", func(t *testing.T, dir string) string {
			writeManifestBytes(t, dir, "not json")
			return dir
		}, "parse manifest.json"},
		{"trailing data", func(t *testing.T, dir string) string {
			data, _ := os.ReadFile(filepath.Join(dir, ManifestFile))
			writeManifestBytes(t, dir, string(data)+"{}")
			return dir
		}, "parse manifest.json"},
		{"file with slash", func(t *testing.T, dir string) string {
			editManifest(t, dir, `"vmlinuz"`, `"boot/vmlinuz"`)
			return dir
		}, "outside"},
		{"file with dot-dot", func(t *testing.T, dir string) string {
			editManifest(t, dir, `"vmlinuz"`, `"../vmlinuz"`)
			return dir
		}, "starts with '.'"},
		{"absolute file", func(t *testing.T, dir string) string {
			editManifest(t, dir, `"vmlinuz"`, `"/boot/vmlinuz"`)
			return dir
		}, "outside"},
		{"renamed version dir", func(t *testing.T, dir string) string {
			to := filepath.Join(filepath.Dir(dir), "2026.11.21-2")
			if err := os.Rename(dir, to); err != nil {
				t.Fatal(err)
			}
			return to
		}, "does not match directory"},
		{"renamed image dir", func(t *testing.T, dir string) string {
			images := filepath.Dir(filepath.Dir(dir))
			if err := os.Rename(filepath.Join(images, "compute"), filepath.Join(images, "master")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(images, "master", "2026.11.21-1")
		}, "does not match directory"},
		{"symlinked manifest", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, ManifestFile)
			os.Rename(p, p+".real")
			if err := os.Symlink(p+".real", p); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "symbolic link"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeImage(t, t.TempDir(), testManifest("compute", "2026.11.21-1"))
			_, err := Open(tt.edit(t, dir))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open() = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, dir string)
		want []string // substrings of the error; nil means it verifies
	}{
		{"intact", func(*testing.T, string) {}, nil},
		{"tampered same size", func(t *testing.T, dir string) {
			overwriteInPlace(t, filepath.Join(dir, "vmlinuz"), "KERNEL bytes\n")
		}, []string{"file vmlinuz", "sha256"}},
		{"truncated", func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, "rootfs.squashfs"), 3)
		}, []string{"file rootfs.squashfs", "size 3, manifest says 13"}},
		{"missing", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "initramfs.img"))
		}, []string{"file initramfs.img", "no such file"}},
		{"replaced by symlink", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "initramfs.img")
			os.Rename(p, p+".real")
			os.Symlink(p+".real", p)
		}, []string{"file initramfs.img", "not a regular file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeImage(t, t.TempDir(), testManifest("compute", "2026.11.21-1"))
			tt.edit(t, dir)
			img, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			err = img.Verify()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Verify() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Verify() = nil, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Verify() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func writeManifestBytes(t *testing.T, dir, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// editManifest replaces every occurrence of old in manifest.json.
func editManifest(t *testing.T, dir, old, new string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	writeManifestBytes(t, dir, strings.ReplaceAll(string(data), old, new))
}
