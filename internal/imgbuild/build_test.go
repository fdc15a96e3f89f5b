package imgbuild

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildRefusesBadVersionFirst: a --version that artifact.Write would refuse after the whole
// build is refused before anything is read or built.
func TestBuildRefusesBadVersionFirst(t *testing.T) {
	for _, v := range []string{"../x", ".hidden", "2026 11 21", "a/b"} {
		t.Run(v, func(t *testing.T) {
			o := Options{Version: v, OutDir: t.TempDir(), CacheDir: t.TempDir()}
			_, err := Build(context.Background(), filepath.Join(t.TempDir(), "images", "none.toml"), o)
			if err == nil || !strings.HasPrefix(err.Error(), "--version: version ") {
				t.Fatalf("err %v, want the version refused first", err)
			}
		})
	}
}
