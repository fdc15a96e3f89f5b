package resolve

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// PruneCache removes the packages cached by Fetch under cacheDir whose sha256 keep does not hold,
// and returns how many it removed. Fetch's partial downloads and anything else there are left.
func PruneCache(cacheDir string, keep map[string]bool) (int, error) {
	dir := filepath.Join(cacheDir, "sha256")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, e := range entries {
		sum, ok := strings.CutSuffix(e.Name(), ".rpm")
		if !ok || !sha256hex.Valid(sum) || keep[sum] {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return removed, err
		}
		removed++
	}
	return removed, nil
}
