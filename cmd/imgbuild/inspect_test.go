package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/testkit/artifacttest"
)

// TestList: list says plainly that nothing was built yet, and fails (after the table) when a
// version is broken.
func TestList(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(t *testing.T, out string)
		image    string
		want     []string // in the output
		wantErr  string   // "" for none
		notInOut string
	}{
		{"no images directory yet", func(t *testing.T, out string) { os.Remove(out) }, "",
			[]string{"no image built yet in "}, "", "IMAGE"},
		{"empty images directory", func(t *testing.T, out string) {}, "",
			[]string{"no image built yet in "}, "", "IMAGE"},
		{"no version of the image", func(t *testing.T, out string) { artifacttest.Publish(t, out, "compute", "1") }, "master",
			[]string{"no version of master in "}, "", "IMAGE"},
		{"all verify", func(t *testing.T, out string) { artifacttest.Publish(t, out, "compute", "1") }, "",
			[]string{"compute  1 ", " ok"}, "", "BROKEN"},
		{"one broken", func(t *testing.T, out string) {
			artifacttest.Publish(t, out, "compute", "1")
			dir := artifacttest.Publish(t, out, "compute", "2")
			if err := os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("tampered\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "", []string{" ok", "BROKEN: "}, "1 of 2 versions broken: bootd refuses them", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "images")
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, out)
			var b strings.Builder
			err := list(&b, out, tt.image)
			if (err == nil) != (tt.wantErr == "") || err != nil && err.Error() != tt.wantErr {
				t.Errorf("err %v, want %q", err, tt.wantErr)
			}
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
			if tt.notInOut != "" && strings.Contains(b.String(), tt.notInOut) {
				t.Errorf("output has %q:\n%s", tt.notInOut, b.String())
			}
		})
	}
}
