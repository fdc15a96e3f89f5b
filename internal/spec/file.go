package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/labcluster/gpucluster/internal/sha256hex"
	"github.com/labcluster/gpucluster/internal/tomlpos"
)

const defaultMode fs.FileMode = 0o644

func readFiles(t table) []File {
	var files []File
	for _, ft := range t.list("files") {
		ft.only("path", "source", "content", "mode", "owner", "group")
		ft.required("path")
		f := File{Path: ft.str("path"), Source: ft.str("source"), Content: ft.str("content"),
			Mode: readMode(ft), Owner: ft.str("owner"), Group: ft.str("group")}
		check(ft, "path", checkImagePath(f.Path))
		checkSource(ft)
		f.Owner = account(ft, "owner", f.Owner)
		f.Group = account(ft, "group", f.Group)
		files = append(files, f)
	}
	return files
}

// checkSource wants exactly one of source and content: a file with both
// would leave a reader guessing which one wins.
func checkSource(t table) {
	_, hasSource := t.m["source"]
	_, hasContent := t.m["content"]
	switch {
	case hasSource && hasContent:
		t.r.fail(t.key("content"), "set either source or content, not both")
	case !hasSource && !hasContent:
		t.r.fail(t.path, "set one of source or content")
	case hasSource:
		check(t, "source", checkSourcePath(t.str("source")))
	}
}

// account defaults an owner or group to root and checks its name.
func account(t table, k, name string) string {
	if _, ok := t.m[k]; !ok {
		return "root"
	}
	check(t, k, checkAccount(name))
	return name
}

// readMode reads an octal string: TOML integers are decimal, so 644 would
// silently mean 0o1204.
func readMode(t table) fs.FileMode {
	v, ok := t.m["mode"]
	if !ok {
		return defaultMode
	}
	s, ok := v.(string)
	if !ok {
		t.r.fail(t.key("mode"), "want an octal string such as \"0644\", got %s", tomlpos.TypeName(v))
		return 0
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || len(s) < 3 || len(s) > 5 || n > 0o7777 {
		t.r.fail(t.key("mode"), "%q is not a file mode (want an octal string such as \"0644\")", s)
		return 0
	}
	return fileMode(n)
}

// fileMode turns Unix mode bits into fs.FileMode, whose special bits differ.
func fileMode(n uint64) fs.FileMode {
	m := fs.FileMode(n & 0o777)
	for bit, mode := range map[uint64]fs.FileMode{0o4000: fs.ModeSetuid, 0o2000: fs.ModeSetgid, 0o1000: fs.ModeSticky} {
		if n&bit != 0 {
			m |= mode
		}
	}
	return m
}

// findSource sets f.LayersDir and checks that Source is a regular file inside
// the layers directory, symlinks followed only as far as they stay inside it.
func findSource(r *reader, dir, path string, f *File) {
	if f.Source == "" || r.err != nil {
		return
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		r.fail(path+".source", "%v", err)
		return
	}
	f.LayersDir = abs
	if f.SourceSHA256, err = hashSource(abs, f.Source); err != nil {
		r.fail(path+".source", "%s", sourceMessage(f.Source, err))
	}
}

// hashSource hashes source, opened as builds open it (openSource).
func hashSource(layersDir, source string) (string, error) {
	in, err := openSource(layersDir, source)
	if err != nil {
		return "", err
	}
	defer in.Close()
	sum, _, err := sha256hex.Of(in)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", source, err)
	}
	return sum, nil
}

// sourceMessage says why a source cannot be read. Other than a missing file that is, in
// practice, os.Root refusing a symlink that leads out of the layers directory.
func sourceMessage(source string, err error) string {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("no file %s in the layers directory", source)
	case errors.As(err, &pe):
		return fmt.Sprintf("%s: %v (a source must stay inside the layers directory, symlinks included)", source, pe.Err)
	}
	return err.Error()
}

// openSource opens the regular file source through an os.Root on the layers directory, so that
// a symlink out of it (files/conf -> /etc/shadow) cannot pull a host file into the image or its
// digest, even one made after the layer was loaded. It opens without blocking and checks the open
// file: a FIFO or a device, there at load or put there since, is refused, not waited on.
func openSource(layersDir, source string) (*os.File, error) {
	root, err := os.OpenRoot(layersDir)
	if err != nil {
		return nil, err
	}
	defer root.Close() // the opened file stays usable
	in, err := root.OpenFile(source, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := in.Stat(); err != nil || !fi.Mode().IsRegular() {
		in.Close()
		if err == nil {
			err = fmt.Errorf("%s is not a regular file", source)
		}
		return nil, err
	}
	return in, nil
}

// Open returns a reader of what the file holds: Content, or Source opened through openSource
// and checked, as it is read, against SourceSHA256 taken at load: bytes edited since would go
// into an image, and a cached layer, keyed by the old ones, so the read that reaches the end of
// different bytes fails instead. The bytes are never held whole: a large file streams.
func (f File) Open() (io.ReadCloser, error) {
	if f.Source == "" {
		return io.NopCloser(strings.NewReader(f.Content)), nil
	}
	in, err := openSource(f.LayersDir, f.Source)
	if err != nil {
		return nil, err
	}
	return &checkedReader{f: in, h: sha256.New(), want: f.SourceSHA256, name: filepath.Join(f.LayersDir, f.Source)}, nil
}

// checkedReader hashes what it reads and fails at the end when the hash is not the one wanted.
type checkedReader struct {
	f    *os.File
	h    hash.Hash
	want string
	name string
}

func (r *checkedReader) Read(p []byte) (int, error) {
	n, err := r.f.Read(p)
	r.h.Write(p[:n])
	if err == io.EOF {
		if sum := hex.EncodeToString(r.h.Sum(nil)); sum != r.want {
			return n, fmt.Errorf("%s changed while the build ran (sha256 %s when its layer was loaded, %s now): build again", r.name, r.want, sum)
		}
	}
	return n, err
}

func (r *checkedReader) Close() error { return r.f.Close() }

// Data is what the file holds, read whole through Open: for small files and tests.
func (f File) Data() ([]byte, error) {
	in, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer in.Close()
	return io.ReadAll(in)
}
