package rootfs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/labcluster/gpucluster/internal/atomicfile"
)

// A cache entry is named by a rename, and the name says "finished": the files under it must be
// on disk before it, and the name on disk after it, or a power cut can leave a key whose files
// are empty (delayed allocation) for later builds to reuse. Variables so a test can watch the
// order in which they happen.
var (
	syncFS  = syncFileSystem
	rename  = os.Rename
	syncDir = atomicfile.SyncDir
)

// syncFileSystem writes out every file of the file system that holds dir: one syncfs(2) rather
// than an fsync per file, as a layer tree holds tens of thousands of them.
func syncFileSystem(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
