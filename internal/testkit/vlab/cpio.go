package vlab

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"sort"
	"strings"
)

// cpioEntry is one file of an initramfs. Only what the test image needs:
// directories, regular files, symlinks and character devices.
type cpioEntry struct {
	Name   string // relative path without leading slash
	Mode   uint32 // type bits | permission bits
	Data   []byte // file contents, or the symlink target
	RMajor uint32 // device numbers of a device node
	RMinor uint32
}

const (
	modeDir     = 0o040000
	modeFile    = 0o100000
	modeSymlink = 0o120000
	modeCharDev = 0o020000
)

// writeInitramfs writes entries as a gzip-compressed newc cpio archive. The
// output depends only on the entries: they are sorted by name (so parents
// come before children), and owners, mtimes, inode numbers and the gzip
// header are fixed, so two builds of the same inputs give the same bytes.
func writeInitramfs(w io.Writer, entries []cpioEntry) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return fmt.Errorf("gzip: %w", err)
	}
	bw := bufio.NewWriter(zw)
	if err := writeCpio(bw, entries); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write cpio: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("gzip: %w", err)
	}
	return nil
}

func writeCpio(w io.Writer, entries []cpioEntry) error {
	sorted := append([]cpioEntry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for i, e := range sorted {
		if i > 0 && e.Name == sorted[i-1].Name {
			return fmt.Errorf("cpio: duplicate entry %q", e.Name)
		}
		if err := writeCpioEntry(w, uint32(i+1), e); err != nil {
			return err
		}
	}
	return writeCpioEntry(w, 0, cpioEntry{Name: "TRAILER!!!"})
}

func writeCpioEntry(w io.Writer, ino uint32, e cpioEntry) error {
	name := strings.TrimPrefix(e.Name, "/")
	nlink := uint32(1)
	if e.Mode&0o170000 == modeDir {
		nlink = 2
	}
	// newc: magic, then 13 eight-digit hex fields: ino, mode, uid, gid,
	// nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor,
	// namesize (with NUL), check.
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, e.Mode, 0, 0, nlink, 0, len(e.Data), 0, 0, e.RMajor, e.RMinor, len(name)+1, 0)
	buf := append([]byte(hdr), name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	buf = append(buf, e.Data...)
	buf = pad4(buf)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write cpio: %w", err)
	}
	return nil
}

// pad4 pads with NULs to a multiple of four; header + name is always
// written in one piece, so buffer length equals the archive offset modulo 4.
func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
