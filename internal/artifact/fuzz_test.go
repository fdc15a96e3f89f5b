package artifact

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzOpenManifest feeds arbitrary bytes to Open as manifest.json. Open must
// not panic, and an accepted manifest must never name a file that could
// leave the version directory.
func FuzzOpenManifest(f *testing.F) {
	golden, err := os.ReadFile(filepath.Join("testdata", "manifest.golden.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(golden)
	f.Add([]byte(`{}`))
	dir := filepath.Join(f.TempDir(), "compute", "2026.11.21-1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		img, err := Open(dir)
		if err != nil {
			return
		}
		m := img.Manifest
		names := m.Referenced()
		for name := range m.Files {
			names = append(names, name)
		}
		for _, name := range names {
			if name == "" || strings.Contains(name, "/") || strings.Contains(name, "..") ||
				strings.Contains(name, `\`) || name == ManifestFile {
				t.Fatalf("accepted manifest names file %q", name)
			}
		}
		if m.Name != "compute" || m.Version != "2026.11.21-1" {
			t.Fatalf("accepted manifest for %s/%s in compute/2026.11.21-1", m.Name, m.Version)
		}
	})
}
