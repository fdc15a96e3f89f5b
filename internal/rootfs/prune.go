package rootfs

import (
	"path/filepath"

	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// stagePrefix names a layer's scratch directory beside the cached trees, while it is built or
// removed: imgbuild clears what a killed build or removal left before the next build (Stages,
// CleanStale).
const stagePrefix = ".build-"

// PruneLayers removes the cached layer trees under cacheDir (as Builder.CacheDir) whose keys keep
// does not hold, and returns how many it removed. Callers hold the cache, as for Build. A tree is
// renamed to a scratch name before it is removed, so a removal cut short (a killed imgbuild, a
// file that will not go) never leaves a partial tree under its key for a later build to reuse.
// The rename is made durable before the first file goes: nothing in POSIX orders a directory's
// rename before the removals inside it, and a power cut must not bring back the key over a tree
// that lost some of its files.
func PruneLayers(cacheDir string, keep map[string]bool) (int, error) {
	dir := filepath.Join(cacheDir, "layers")
	return sha256hex.Prune(dir, "", keep, func(tree, key string) error {
		scratch := filepath.Join(dir, stagePrefix+"pruned-"+key)
		if err := rename(tree, scratch); err != nil {
			return err
		}
		if err := syncDir(dir); err != nil {
			return err
		}
		return removeAll(scratch)
	})
}
