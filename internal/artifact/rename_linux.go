package artifact

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace moves the finished temp dir into place. RENAME_NOREPLACE
// makes "refuse an existing version" atomic: a plain rename(2) would silently
// replace an empty directory that appeared since our first check.
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// Some file systems lack RENAME_NOREPLACE; fall back to check + rename.
		return renameChecked(from, to)
	}
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
		return ErrExists
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}
