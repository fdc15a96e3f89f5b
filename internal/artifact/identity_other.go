//go:build !linux

package artifact

import "io/fs"

// identityOf falls back to size and mtime where Stat_t differs; bootd itself
// runs on Linux only.
func identityOf(fi fs.FileInfo) fileID {
	return fileID{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
}
