// Package fetchinitrd makes the initrd that carries bootd-fetch to a node: a gzip'd newc cpio
// archive the kernel unpacks over the image's own initramfs.
package fetchinitrd

import (
	"bytes"
	"compress/gzip"
	"fmt"
)

// Name is the initrd's name, as bootd serves it (/node/<Name>) and the EFI stub knows it.
const Name = "bootd-fetch.img"

// ProgramPath is where bootd-fetch lands in the node's initramfs; the base layer's dracut module
// (99bootd-verify) runs it from there when the command line has rd.bootd.index=.
const ProgramPath = "usr/lib/bootd/bootd-fetch"

// Make returns the initrd holding program at ProgramPath. The same program gives the same bytes:
// owner root, mtime 0, inodes numbered in order, no name or time in the gzip header.
func Make(program []byte) ([]byte, error) {
	var raw bytes.Buffer
	w := &cpioWriter{b: &raw}
	for _, d := range []string{"usr", "usr/lib", "usr/lib/bootd"} {
		w.entry(d, 0o040755, nil)
	}
	w.entry(ProgramPath, 0o100755, program)
	w.entry("TRAILER!!!", 0, nil)
	var out bytes.Buffer
	z, err := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := z.Write(raw.Bytes()); err != nil {
		return nil, fmt.Errorf("fetch initrd: %w", err)
	}
	if err := z.Close(); err != nil {
		return nil, fmt.Errorf("fetch initrd: %w", err)
	}
	return out.Bytes(), nil
}

// cpioWriter writes newc ("070701") entries.
type cpioWriter struct {
	b   *bytes.Buffer
	ino int
}

func (w *cpioWriter) entry(name string, mode int, data []byte) {
	w.ino++
	nlink := 1
	if mode&0o040000 != 0 {
		nlink = 2
	}
	fmt.Fprintf(w.b, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		w.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	w.b.WriteString(name)
	w.b.WriteByte(0)
	w.pad()
	w.b.Write(data)
	w.pad()
}

func (w *cpioWriter) pad() {
	for w.b.Len()%4 != 0 {
		w.b.WriteByte(0)
	}
}
