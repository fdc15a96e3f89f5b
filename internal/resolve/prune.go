package resolve

import (
	"os"
	"path/filepath"

	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// PruneCache removes the packages cached by Fetch under cacheDir whose sha256 keep does not hold,
// and returns how many it removed. Fetch's partial downloads and anything else there are left.
func PruneCache(cacheDir string, keep map[string]bool) (int, error) {
	return sha256hex.Prune(filepath.Join(cacheDir, "sha256"), ".rpm", keep, func(path, _ string) error { return os.Remove(path) })
}
