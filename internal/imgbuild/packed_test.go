package imgbuild

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDropSuperseded: before packing a new root, the image's last packed root goes, unless
// another image's record names it, and nothing else does.
func TestDropSuperseded(t *testing.T) {
	key := func(c string) string { return strings.Repeat(c, 64) }
	cases := []struct {
		name      string
		records   map[string]string // image -> its record's packed key
		image     string
		newKey    string
		wantGone  []string
		wantStays []string
	}{
		{"the image's last packed root goes", map[string]string{"compute": key("a"), "master": key("b")}, "compute", key("c"), []string{key("a")}, []string{key("b")}},
		{"shared with another image: stays", map[string]string{"compute": key("a"), "master": key("a")}, "compute", key("c"), nil, []string{key("a")}},
		{"the same key: stays", map[string]string{"compute": key("a")}, "compute", key("a"), nil, []string{key("a")}},
		{"no record: nothing goes", map[string]string{"master": key("b")}, "compute", key("c"), nil, []string{key("b")}},
		{"a record naming a path: nothing goes", map[string]string{"compute": "../../etc"}, "compute", key("c"), nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cache := t.TempDir()
			for image, k := range tc.records {
				if err := writeKept(cache, image, keptRecord{Packed: k}); err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Join(packedDir(cache), k), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := dropSuperseded(cache, tc.image, tc.newKey); err != nil {
				t.Fatal(err)
			}
			for _, k := range tc.wantGone {
				if _, err := os.Stat(filepath.Join(packedDir(cache), k)); !os.IsNotExist(err) {
					t.Errorf("packed root %s…: %v, want it removed", k[:4], err)
				}
			}
			for _, k := range tc.wantStays {
				if _, err := os.Stat(filepath.Join(packedDir(cache), k)); err != nil {
					t.Errorf("packed root %s…: %v, want it kept", k[:4], err)
				}
			}
		})
	}
}
