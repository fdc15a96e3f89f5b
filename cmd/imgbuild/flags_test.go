package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageArchive: a relative directory is made absolute (the fetcher refuses relative paths),
// a URL passes as given, and a missing directory is refused before the build starts.
func TestPackageArchive(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "rpms"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	tests := []struct {
		in, want, wantErr string
	}{
		{"", "", ""},
		{"rpms", filepath.Join(dir, "rpms"), ""},
		{"./rpms/", filepath.Join(dir, "rpms"), ""},
		{filepath.Join(dir, "rpms"), filepath.Join(dir, "rpms"), ""},
		{"https://ci.example.org/published/rpms", "https://ci.example.org/published/rpms", ""},
		{"file:///srv/published/rpms", "file:///srv/published/rpms", ""},
		{"published/rpms", "", "--package-archive published/rpms: not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := packageArchive(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("packageArchive(%q) = %q, %v; want an error with %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("packageArchive(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}
