package bootd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/atomicfile"
	"github.com/labcluster/gpucluster/internal/config"
)

// FetchInitrdName is the initrd bootd sends nodes after their image's own: the fetch program.
const FetchInitrdName = "bootd-fetch.img"

// FetchProgramPath is where the fetch program lands in the node's initramfs; the base layer's
// dracut module (99bootd-verify) runs it from there when the command line has rd.bootd.index=.
const FetchProgramPath = "usr/lib/bootd/bootd-fetch"

// prepareFetchInitrd writes the fetch initrd into the state directory: a newc cpio archive (the
// kernel unpacks it over the image's initramfs) holding the fetch program. It returns "" when
// there is no program to send: nodes then fetch their root as one file.
func prepareFetchInitrd(cfg config.Config, log logrus.FieldLogger) (string, error) {
	prog, ok, err := config.FindFetchProgram(cfg.FetchProgram)
	if err != nil || !ok {
		if err == nil {
			log.Warn("no bootd-fetch found (fetch_program, beside bootd, /usr/libexec/bootd): nodes fetch their root image whole, not by chunks")
		}
		return "", err
	}
	data, err := os.ReadFile(prog)
	if err != nil {
		return "", fmt.Errorf("fetch program: %w", err)
	}
	var b bytes.Buffer
	w := newCpio(&b)
	for _, d := range []string{"usr", "usr/lib", "usr/lib/bootd"} {
		w.dir(d)
	}
	w.file(FetchProgramPath, 0o755, data)
	w.trailer()
	path := filepath.Join(cfg.StateDir, FetchInitrdName)
	if err := atomicfile.Write(path, b.Bytes(), 0o644); err != nil {
		return "", err
	}
	log.WithFields(logrus.Fields{"program": prog, "initrd": path, "bytes": b.Len()}).Info("nodes fetch chunked roots with bootd-fetch")
	return path, nil
}

// cpioWriter writes a newc ("070701") archive, the format the kernel unpacks as an initramfs:
// owner root, mtime 0, inode numbers in order, so the same program gives the same archive.
type cpioWriter struct {
	b   *bytes.Buffer
	ino int
}

func newCpio(b *bytes.Buffer) *cpioWriter { return &cpioWriter{b: b} }

func (w *cpioWriter) dir(name string)                         { w.entry(name, 0o040755, nil) }
func (w *cpioWriter) file(name string, perm int, data []byte) { w.entry(name, 0o100000|perm, data) }
func (w *cpioWriter) trailer()                                { w.entry("TRAILER!!!", 0, nil) }

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
