// Package atomicfile replaces files so that a crash at any moment leaves either the old or the
// new content: temporary file in the same directory, fsync, rename, fsync of the directory.
package atomicfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces path with data, with permissions perm. The directory must exist.
func Write(path string, data []byte, perm fs.FileMode) error {
	if err := Rename(path, "."+filepath.Base(path)+tmpInfix+"*", data, perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// Rename is Write without the directory's sync, for a caller that writes many files into one
// directory and syncs it once (SyncDir), and with the temporary file's name pattern (as
// os.CreateTemp takes it) chosen by the caller, whose own clean-up may know that name.
func Rename(path, tmpPattern string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), tmpPattern)
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	// Chmod before the data goes in: a secret is never readable under a looser mode.
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	return err
}

// tmpInfix marks Write's temporary files: .<name>.tmp-<random>, beside the file they replace.
const tmpInfix = ".tmp-"

// Temps lists the temporary files of Write in dir: writes in progress, or what a killed process
// left for ever (Write removes its own on any error it sees). Only the caller knows whether a
// write can be in progress, and whether dir holds other files named so.
func Temps(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, ".*"+tmpInfix+"*"))
}

// SyncDir makes a directory's entries (new files, renames, removals) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
