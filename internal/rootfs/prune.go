package rootfs

import (
	"os"
	"path/filepath"

	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// stagePrefix names a layer's scratch directory beside the cached trees, while it is built or
// removed: Build clears what a killed build or removal left (CleanStale).
const stagePrefix = ".build-"

// PruneLayers removes the cached layer trees under cacheDir (as Builder.CacheDir) whose keys keep
// does not hold, and returns how many it removed. Callers hold the cache, as for Build. A tree is
// renamed to a scratch name before it is removed, so a removal cut short (a killed imgbuild, a
// file that will not go) never leaves a partial tree under its key for a later build to reuse.
func PruneLayers(cacheDir string, keep map[string]bool) (int, error) {
	dir := filepath.Join(cacheDir, "layers")
	return sha256hex.Prune(dir, "", keep, func(tree, key string) error {
		scratch := filepath.Join(dir, stagePrefix+"pruned-"+key)
		if err := os.Rename(tree, scratch); err != nil {
			return err
		}
		return removeAll(scratch)
	})
}
