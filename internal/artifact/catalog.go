package artifact

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/logfield"
)

// Catalog is bootd's read side of the images directory. It serves only
// versions that verify, and remembers each verification under the identity
// (device, inode, size, mtime, ctime) of manifest.json and every listed file:
// a second request costs a few stat calls instead of re-hashing gigabytes,
// and any change to a file after verification forces a new one.
// It is safe for concurrent use.
type Catalog struct {
	dir string
	log logrus.FieldLogger

	mu      sync.Mutex
	entries map[string]*entry // by version directory
	links   map[string]bool   // symlinked image and version directories already logged
}

// entry caches what is known about one version directory. Its own mutex
// serialises work on that version only, so hashing a large new image does
// not hold up requests for other versions.
type entry struct {
	mu  sync.Mutex
	dir string

	manID   fileID // manifest.json identity when img/loadErr was computed
	loaded  bool
	img     *Image
	loadErr error

	snap map[string]fileID // identities when verr was computed; nil: not verified
	verr error
}

// NewCatalog returns a Catalog over imagesDir. Nothing is read until asked.
func NewCatalog(imagesDir string, log logrus.FieldLogger) *Catalog {
	return &Catalog{dir: imagesDir, log: log, entries: map[string]*entry{}, links: map[string]bool{}}
}

// Resolve returns the version of image name that bootd should serve: the
// pinned version if given and it verifies, else the newest version that
// verifies. Errors wrap ErrNotFound.
func (c *Catalog) Resolve(name, pinnedVersion string) (*Image, error) {
	if err := checkName("image name", name); err != nil {
		return nil, fmt.Errorf("resolve image: %w: %w", ErrNotFound, err)
	}
	if pinnedVersion != "" {
		return c.resolvePinned(name, pinnedVersion)
	}
	return c.resolveNewest(name)
}

func (c *Catalog) resolvePinned(name, version string) (*Image, error) {
	e, err := c.lookup(name, version)
	if err != nil {
		return nil, fmt.Errorf("resolve image %s pinned to %s: %w", name, version, err)
	}
	img, err := e.check(c.log)
	if err != nil {
		return nil, fmt.Errorf("resolve image %s pinned to %s: %w: %w", name, version, ErrNotFound, err)
	}
	return img, nil
}

func (c *Catalog) resolveNewest(name string) (*Image, error) {
	entries, err := c.versions(name)
	if err != nil {
		return nil, fmt.Errorf("resolve image %s: %w", name, err)
	}
	for _, e := range c.newestFirst(entries) {
		if img, err := e.check(c.log); err == nil {
			return img, nil
		}
	}
	return nil, fmt.Errorf("resolve image %s: no version verifies among %d: %w", name, len(entries), ErrNotFound)
}

// newestFirst loads each manifest (cheap, cached) and orders the versions
// whose manifest is valid, newest first, so only as many versions are
// hashed as it takes to find one that verifies.
func (c *Catalog) newestFirst(entries []*entry) []*entry {
	var ok []*entry
	imgs := map[*entry]*Image{}
	for _, e := range entries {
		if img, err := e.manifest(c.log); err == nil {
			ok = append(ok, e)
			imgs[e] = img
		}
	}
	slices.SortFunc(ok, func(a, b *entry) int {
		switch {
		case newer(imgs[a], imgs[b]):
			return -1
		case newer(imgs[b], imgs[a]):
			return 1
		}
		return 0
	})
	return ok
}

// Open opens a file of a verified version, checking at open time that it is
// still the file that was verified. Anything not listed by a verified
// manifest yields an error wrapping ErrNotFound. The caller closes the file.
func (c *Catalog) Open(name, version, file string) (*os.File, *Image, error) {
	if err := checkFileName(file); err != nil {
		return nil, nil, fmt.Errorf("open %s/%s/%s: %w: %w", name, version, file, ErrNotFound, err)
	}
	e, err := c.lookup(name, version)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s/%s/%s: %w", name, version, file, err)
	}
	return e.open(file, c.log)
}

// lookup returns the cache entry of an existing version directory. Names
// are checked and the directory must exist before an entry is made, so
// requests for made-up versions neither grow the cache nor fill the log.
func (c *Catalog) lookup(name, version string) (*entry, error) {
	if err := checkName("image name", name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err := checkName("version", version); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err := c.realDir(filepath.Join(c.dir, name)); err != nil {
		return nil, err
	}
	dir := filepath.Join(c.dir, name, version)
	if err := c.realDir(dir); err != nil {
		return nil, err
	}
	return c.entry(dir), nil
}

// realDir wants dir to be a directory itself, not a symlink: an image or version directory that
// is a link would be followed out of the images directory, to whatever it names. A link is
// refused with one error line the first time it is met; anything else that is not a directory
// is simply not an image.
func (c *Catalog) realDir(dir string) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: %w", dir, ErrNotFound)
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		c.refuseLink(dir)
		return fmt.Errorf("%s is a symlink: %w", dir, ErrNotFound)
	case !fi.IsDir():
		return fmt.Errorf("%s: %w", dir, ErrNotFound)
	}
	return nil
}

// refuseLink logs, once per catalog, that the image or version directory dir is a symlink.
func (c *Catalog) refuseLink(dir string) {
	c.mu.Lock()
	seen := c.links[dir]
	c.links[dir] = true
	c.mu.Unlock()
	if seen {
		return
	}
	target, _ := os.Readlink(dir)
	c.log.WithFields(logrus.Fields{"dir": dir, "target": target}).
		Error("image directory refused: it is a symlink, and bootd serves only directories inside the images directory (move the image there, or publish it with imgbuild --out)")
}

// versions returns the entries of every version directory of name, dropping
// cached entries of versions that have been removed.
func (c *Catalog) versions(name string) ([]*entry, error) {
	nameDir := filepath.Join(c.dir, name)
	if err := c.realDir(nameDir); err != nil {
		return nil, err
	}
	des, err := os.ReadDir(nameDir)
	if err != nil {
		return nil, err
	}
	versions, links := names(des)
	for _, l := range links {
		c.refuseLink(filepath.Join(nameDir, l))
	}
	entries := make([]*entry, 0, len(versions))
	for _, v := range versions {
		entries = append(entries, c.entry(filepath.Join(nameDir, v)))
	}
	c.prune(nameDir, versions)
	return entries, nil
}

func (c *Catalog) entry(dir string) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[dir]
	if e == nil {
		e = &entry{dir: dir}
		c.entries[dir] = e
	}
	return e
}

func (c *Catalog) prune(nameDir string, present []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for dir := range c.entries {
		if filepath.Dir(dir) == nameDir && !slices.Contains(present, filepath.Base(dir)) {
			delete(c.entries, dir)
		}
	}
}

// ReadNames lists the subdirectories of dir that are valid image or version
// names; this skips Write's hidden temp directories and anything else that
// is not an image or a version.
func ReadNames(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	dirs, _ := names(des)
	return dirs, nil
}

// names are the entries that are directories with a valid image or version name, and the
// symlinks with such a name (which are not images: Catalog refuses them aloud).
func names(des []fs.DirEntry) (dirs, links []string) {
	for _, de := range des {
		switch {
		case checkName("", de.Name()) != nil:
		case de.IsDir():
			dirs = append(dirs, de.Name())
		case de.Type()&fs.ModeSymlink != 0:
			links = append(links, de.Name())
		}
	}
	return dirs, links
}

// manifest returns the parsed manifest, re-reading it only when the identity
// of manifest.json changed. A fresh failure is logged once.
func (e *entry) manifest(log logrus.FieldLogger) (*Image, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.loadLocked(log)
}

func (e *entry) loadLocked(log logrus.FieldLogger) (*Image, error) {
	id, err := statID(filepath.Join(e.dir, ManifestFile))
	if err != nil {
		return nil, err
	}
	if e.loaded && id == e.manID {
		return e.img, e.loadErr
	}
	e.manID, e.loaded, e.snap, e.verr = id, true, nil, nil
	e.img, e.loadErr = Open(e.dir)
	if e.loadErr != nil {
		refused(log, e.dir, e.loadErr)
	}
	return e.img, e.loadErr
}

// check returns the image if it verifies, hashing only when the identity of
// manifest.json or of a listed file changed since the last verification.
func (e *entry) check(log logrus.FieldLogger) (*Image, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.checkLocked(log)
}

func (e *entry) checkLocked(log logrus.FieldLogger) (*Image, error) {
	img, err := e.loadLocked(log)
	if err != nil {
		return nil, err
	}
	// The snapshot is taken before hashing: if a file changes while it is
	// hashed, the next stat differs from the snapshot and forces a re-check.
	snap, err := img.snapshot()
	if err != nil {
		return nil, err
	}
	if e.snap != nil && maps.Equal(snap, e.snap) {
		return e.result()
	}
	start := time.Now()
	e.snap, e.verr = snap, img.Verify()
	if e.verr != nil {
		refused(log, e.dir, e.verr)
	} else {
		log.WithFields(logrus.Fields{"dir": e.dir, "duration": logfield.Duration(time.Since(start))}).
			Info("image version verified")
	}
	return e.result()
}

func (e *entry) result() (*Image, error) {
	if e.verr != nil {
		return nil, e.verr
	}
	return e.img, nil
}

// open opens a listed file of the verified version and compares the
// identity of what was opened with the verified one, closing the window
// between the stat in check and the open.
func (e *entry) open(file string, log logrus.FieldLogger) (*os.File, *Image, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	img, err := e.checkLocked(log)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s/%s: %w: %w", e.dir, file, ErrNotFound, err)
	}
	want, ok := e.snap[file]
	if !ok || file == ManifestFile {
		return nil, nil, fmt.Errorf("open %s/%s: not listed in the manifest: %w", e.dir, file, ErrNotFound)
	}
	f, got, err := openRegular(filepath.Join(e.dir, file))
	if err != nil {
		return nil, nil, fmt.Errorf("open %s/%s: %w: %w", e.dir, file, ErrNotFound, err)
	}
	if got != want {
		f.Close()
		e.snap = nil // verify again on the next request
		err := fmt.Errorf("open %s/%s: file changed since it was verified: %w", e.dir, file, ErrNotFound)
		refused(log, e.dir, err)
		return nil, nil, err
	}
	return f, img, nil
}

// refused is the one log line for a version that cannot be served.
func refused(log logrus.FieldLogger, dir string, err error) {
	msg := err.Error()
	// The error usually names the directory already; keep the line short.
	msg = strings.TrimPrefix(msg, "open image "+dir+": ")
	log.WithFields(logrus.Fields{"dir": dir, "problem": msg}).Error("image version refused")
}
