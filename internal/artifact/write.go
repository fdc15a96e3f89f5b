package artifact

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/labcluster/gpucluster/internal/atomicfile"
	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// Write publishes one version: it copies the files m references from srcDir
// into <imagesDir>/<name>/.<version>.tmp-<random>, records their sizes and
// sha256 in m.Files (replacing what the caller put there), writes
// manifest.json, fsyncs everything and renames the directory to
// <imagesDir>/<name>/<version>. A reader sees the whole version or nothing.
//
// Files are copied, not hard-linked or moved: the hash is computed over the
// very bytes written to the new inode, so nothing that later happens to
// srcDir (a build cache that is reused or rewritten in place) can change a
// published image behind its manifest, and srcDir stays usable for the caller.
// The cost is one extra sequential write per build, small next to the build.
func Write(imagesDir string, m Manifest, srcDir string) (dir string, err error) {
	return write(imagesDir, m, srcDir, copyFile)
}

// WriteLinked is Write for a srcDir whose files nobody changes any more: each is hard-linked
// into the version where it can be (the same file system), not copied, and copied where it
// cannot. imgbuild publishes a multi-GB root this way: written once, by the packer, and shared
// with the build cache, which reuses it when nothing changed. Each file is read once to hash it,
// except those known gives (the caller has just checked them): a linked file listed there is
// recorded with known's size and digest.
func WriteLinked(imagesDir string, m Manifest, srcDir string, known map[string]File) (dir string, err error) {
	return write(imagesDir, m, srcDir, func(src, dst string) (File, error) {
		f, ok := known[filepath.Base(src)]
		if !ok {
			f = File{}
		}
		return linkFile(src, dst, f)
	})
}

func write(imagesDir string, m Manifest, srcDir string, put func(src, dst string) (File, error)) (dir string, err error) {
	if err := checkWritable(m); err != nil {
		return "", fmt.Errorf("write image: %w", err)
	}
	nameDir := filepath.Join(imagesDir, m.Name)
	final := filepath.Join(nameDir, m.Version)
	if err := refuseExisting(final); err != nil {
		return "", err
	}
	if err := mkdirAll(nameDir); err != nil {
		return "", fmt.Errorf("write image: %w", err)
	}
	tmp, err := os.MkdirTemp(nameDir, "."+m.Version+tmpInfix)
	if err != nil {
		return "", fmt.Errorf("write image: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := fill(tmp, &m, srcDir, put); err != nil {
		return "", fmt.Errorf("write image %s/%s: %w", m.Name, m.Version, err)
	}
	if err := publish(tmp, final); err != nil {
		return "", fmt.Errorf("write image %s/%s: %w", m.Name, m.Version, err)
	}
	return final, nil
}

// The modes of what Write publishes, set explicitly rather than left to the umask: under an
// admin's umask 077 a version would be 0700/0600, unreadable by a bootd or an nginx that does
// not run as imgbuild's user, and what readers may open would depend on the host that built it.
const (
	dirMode  fs.FileMode = 0o755
	fileMode fs.FileMode = 0o644
)

// mkdirAll is os.MkdirAll giving every directory it creates dirMode whatever the umask, and
// syncing the parent of every directory it reaches, made or found: a version must not lose the
// directories above it in a crash, and one found may have been made a moment ago by another
// writer that has not synced it yet. A directory that exists keeps its mode: an admin may have
// restricted the images directory.
func mkdirAll(dir string) error {
	err := os.Mkdir(dir, dirMode)
	if errors.Is(err, fs.ErrNotExist) {
		if err = mkdirAll(filepath.Dir(dir)); err == nil {
			err = os.Mkdir(dir, dirMode)
		}
	}
	switch {
	case err == nil:
		err = os.Chmod(dir, dirMode)
	case errors.Is(err, fs.ErrExist):
		if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
			err = nil
		}
	}
	if err != nil {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// syncDir is atomicfile.SyncDir; a variable so that tests can see which directories are synced.
var syncDir = atomicfile.SyncDir

// create makes a new file of the version with fileMode whatever the umask.
func create(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(fileMode); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// tmpInfix marks a version directory that Write is still filling: .<version>.tmp-<random>.
const tmpInfix = ".tmp-"

// Unfinished lists the version directories Write was filling under imagesDir, for every image
// name: writes in progress, or what a killed writer left. No version is named so: a version
// cannot start with a dot.
func Unfinished(imagesDir string) ([]string, error) {
	return filepath.Glob(filepath.Join(imagesDir, "*", ".*"+tmpInfix+"*"))
}

// checkWritable validates what the caller controls before any copying.
func checkWritable(m Manifest) error {
	m.Files = map[string]File{}
	for _, ref := range m.Referenced() {
		// Placeholder entries let Validate check names; Write computes the real ones.
		m.Files[ref] = File{SHA256: emptySHA256}
	}
	return m.Validate()
}

var emptySHA256 = sha256hex.OfBytes(nil)

func refuseExisting(final string) error {
	_, err := os.Lstat(final)
	if err == nil {
		return fmt.Errorf("write image %s: %w", final, ErrExists)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write image: %w", err)
	}
	return nil
}

// fill copies the referenced files into tmp, computes m.Files and writes the
// manifest, all synced to disk.
func fill(tmp string, m *Manifest, srcDir string, put func(src, dst string) (File, error)) error {
	// MkdirTemp creates 0700; bootd may run as another user than imgbuild.
	if err := os.Chmod(tmp, dirMode); err != nil {
		return err
	}
	m.Created = m.Created.UTC()
	m.Files = map[string]File{}
	for _, ref := range m.Referenced() {
		f, err := put(filepath.Join(srcDir, ref), filepath.Join(tmp, ref))
		if err != nil {
			return err
		}
		m.Files[ref] = f
	}
	if err := m.Validate(); err != nil {
		return err
	}
	if err := writeManifest(tmp, *m); err != nil {
		return err
	}
	return syncDir(tmp)
}

// copyFile copies a regular file and hashes the bytes as they are written.
func copyFile(src, dst string) (File, error) {
	in, err := os.Open(src)
	if err != nil {
		return File{}, err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil {
		return File{}, err
	} else if !fi.Mode().IsRegular() {
		return File{}, fmt.Errorf("%s: not a regular file", src)
	}
	out, err := create(dst)
	if err != nil {
		return File{}, err
	}
	sum, n, err := sha256hex.Of(io.TeeReader(in, out))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return File{}, fmt.Errorf("copy %s: %w", src, err)
	}
	return File{Size: n, SHA256: sum}, nil
}

// linkFile hard-links src to dst, gives the file the published mode, and hashes it unless known
// has its digest; where the link cannot be made (another file system), it copies (and hashes).
func linkFile(src, dst string, known File) (File, error) {
	if fi, err := os.Lstat(src); err != nil {
		return File{}, err
	} else if !fi.Mode().IsRegular() {
		return File{}, fmt.Errorf("%s: not a regular file", src)
	}
	if err := os.Link(src, dst); err != nil {
		return copyFile(src, dst)
	}
	f, err := os.Open(dst)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	if err := f.Chmod(fileMode); err != nil {
		return File{}, err
	}
	if known.SHA256 != "" {
		return known, f.Sync()
	}
	sum, n, err := sha256hex.Of(f)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return File{}, fmt.Errorf("link %s: %w", src, err)
	}
	return File{Size: n, SHA256: sum}, nil
}

func writeManifest(dir string, m Manifest) error {
	data, err := m.Encode()
	if err != nil {
		return err
	}
	f, err := create(filepath.Join(dir, ManifestFile))
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", ManifestFile, err)
	}
	return nil
}

// publish renames tmp to final and syncs their directory so that the new entry survives a
// crash (mkdirAll synced the directories above it).
func publish(tmp, final string) error {
	if err := renameNoReplace(tmp, final); err != nil {
		if errors.Is(err, ErrExists) {
			return fmt.Errorf("%s: %w", final, ErrExists)
		}
		return err
	}
	// After the rename the version is visible; a failed sync now means it
	// may not survive a crash, which the caller must hear about.
	if err := syncDir(filepath.Dir(final)); err != nil {
		return fmt.Errorf("published %s but: %w", final, err)
	}
	return nil
}
