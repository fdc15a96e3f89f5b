package artifact

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// ErrNotFound is returned (wrapped) when an image, version or file does not
// exist or may not be served; check it with errors.Is.
var ErrNotFound = errors.New("not found")

// ErrExists is returned (wrapped) by Write when the version already exists:
// a published version is immutable.
var ErrExists = errors.New("version already exists")

// Image is one opened version directory. Its Manifest has been validated but
// its files are only checked by Verify. Treat it as read-only: a Catalog
// hands the same *Image to every caller.
type Image struct {
	Dir      string
	Manifest Manifest
}

// Open reads and validates dir/manifest.json and checks that its name and
// version match the directory, so a copied or renamed directory is refused.
func Open(dir string) (*Image, error) {
	dir = filepath.Clean(dir)
	data, err := readManifest(dir)
	if err != nil {
		return nil, err
	}
	m, err := decodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("open image %s: %w", dir, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("open image %s: invalid %s: %w", dir, ManifestFile, err)
	}
	if err := checkPlacement(dir, m); err != nil {
		return nil, fmt.Errorf("open image %s: %w", dir, err)
	}
	return &Image{Dir: dir, Manifest: m}, nil
}

func readManifest(dir string) ([]byte, error) {
	f, _, err := openRegular(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("open image %s: %w", dir, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("open image %s: read %s: %w", dir, ManifestFile, err)
	}
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("open image %s: %s is larger than %d bytes", dir, ManifestFile, maxManifestSize)
	}
	return data, nil
}

func checkPlacement(dir string, m Manifest) error {
	if v := filepath.Base(dir); v != m.Version {
		return fmt.Errorf("manifest version %q does not match directory %q", m.Version, v)
	}
	if n := filepath.Base(filepath.Dir(dir)); n != m.Name {
		return fmt.Errorf("manifest name %q does not match directory %q", m.Name, n)
	}
	return nil
}

// Verify checks that every listed file exists as a regular file with the
// listed size and sha256. Errors name the file and what differs.
func (img *Image) Verify() error {
	names := slices.Sorted(maps.Keys(img.Manifest.Files))
	// Sizes first: a missing or truncated file is found without hashing
	// gigabytes of the others.
	for _, name := range names {
		if err := img.checkSize(name); err != nil {
			return err
		}
	}
	for _, name := range names {
		if err := img.checkHash(name); err != nil {
			return err
		}
	}
	return nil
}

func (img *Image) checkSize(name string) error {
	want := img.Manifest.Files[name]
	fi, err := os.Lstat(filepath.Join(img.Dir, name))
	if err != nil {
		return fmt.Errorf("verify %s: file %s: %w", img.Dir, name, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("verify %s: file %s: not a regular file (%s)", img.Dir, name, fi.Mode().Type())
	}
	if fi.Size() != want.Size {
		return fmt.Errorf("verify %s: file %s: size %d, manifest says %d", img.Dir, name, fi.Size(), want.Size)
	}
	return nil
}

func (img *Image) checkHash(name string) error {
	want := img.Manifest.Files[name]
	f, _, err := openRegular(filepath.Join(img.Dir, name))
	if err != nil {
		return fmt.Errorf("verify %s: file %s: %w", img.Dir, name, err)
	}
	defer f.Close()
	sum, size, err := sha256hex.Of(f)
	if err != nil {
		return fmt.Errorf("verify %s: file %s: %w", img.Dir, name, err)
	}
	if size != want.Size {
		return fmt.Errorf("verify %s: file %s: size %d, manifest says %d", img.Dir, name, size, want.Size)
	}
	if sum != want.SHA256 {
		return fmt.Errorf("verify %s: file %s: sha256 %s, manifest says %s", img.Dir, name, sum, want.SHA256)
	}
	return nil
}

// snapshot returns the identity of manifest.json and of every listed file,
// the key under which a verification result stays valid.
func (img *Image) snapshot() (map[string]fileID, error) {
	ids := make(map[string]fileID, len(img.Manifest.Files)+1)
	for _, name := range append(slices.Collect(maps.Keys(img.Manifest.Files)), ManifestFile) {
		id, err := statID(filepath.Join(img.Dir, name))
		if err != nil {
			return nil, err
		}
		ids[name] = id
	}
	return ids, nil
}
