package artifact

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// fileID is a file's identity: if none of it changed, the bytes we hashed are
// still the bytes on disk (for anything short of raw-device tampering).
type fileID struct {
	exists bool
	dev    uint64
	ino    uint64
	size   int64
	mtime  int64
	ctime  int64
}

// statID returns the identity of path without following a symlink; a missing
// file has the zero identity so "still missing" compares equal.
func statID(path string) (fileID, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileID{}, nil
	}
	if err != nil {
		return fileID{}, err
	}
	return identityOf(fi), nil
}

// openRegular opens path read-only, refusing symlinks (O_NOFOLLOW) and
// anything but a regular file: an image directory holds plain files only, so
// a link or device there is a mistake or an attack.
func openRegular(path string) (*os.File, fileID, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fileID{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fileID{}, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fileID{}, fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
	}
	return f, identityOf(fi), nil
}

// renameChecked is the portable fallback: check, then rename. It leaves a
// tiny window in which a concurrent writer could win, which Write's caller
// (one imgbuild at a time) does not hit.
func renameChecked(from, to string) error {
	if _, err := os.Lstat(to); err == nil {
		return ErrExists
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.Rename(from, to)
}
