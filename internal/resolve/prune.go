package resolve

import (
	"os"
	"path/filepath"

	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// PruneCache removes the packages cached by Fetch under cacheDir whose sha256 keep does not hold,
// and returns how many it removed. Fetch's partial downloads (Partials) and anything else there
// are left.
func PruneCache(cacheDir string, keep map[string]bool) (int, error) {
	return sha256hex.Prune(filepath.Join(cacheDir, "sha256"), ".rpm", keep, func(path, _ string) error { return os.Remove(path) })
}

// Partials lists the downloads Fetch has not finished under cacheDir: its own in progress, or
// what a killed one left, as a finished download is renamed to its sha256.
func Partials(cacheDir string) ([]string, error) {
	return filepath.Glob(filepath.Join(cacheDir, "sha256", partialPrefix+"*"))
}
