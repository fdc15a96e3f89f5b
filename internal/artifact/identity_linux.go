package artifact

import (
	"io/fs"
	"syscall"
)

// identityOf adds what only the kernel knows: device, inode and ctime. ctime
// matters because mtime can be set back with touch, ctime cannot.
func identityOf(fi fs.FileInfo) fileID {
	id := fileID{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev = uint64(st.Dev)
		id.ino = st.Ino
		id.ctime = st.Ctim.Nano()
	}
	return id
}
