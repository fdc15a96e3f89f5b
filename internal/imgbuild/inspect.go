package imgbuild

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/resolve"
)

// Version is one published version, as `imgbuild list` shows it.
type Version struct {
	Image *artifact.Image
	Size  int64
	Err   error // the version does not verify: bootd will refuse it
}

// List returns the versions of every image in outDir (or of one, when name is set), each
// checked the way bootd checks it. A directory no build has made yet holds no versions.
func List(outDir, name string) ([]Version, error) {
	names := []string{name}
	if name == "" {
		var err error
		if names, err = readNames(outDir); err != nil {
			return nil, err
		}
	}
	var out []Version
	for _, n := range names {
		vs, err := versionsOf(filepath.Join(outDir, n))
		if err != nil {
			return nil, err
		}
		out = append(out, vs...)
	}
	return out, nil
}

func versionsOf(dir string) ([]Version, error) {
	versions, err := readNames(dir) // skips .tmp- dirs, builds in progress
	if err != nil {
		return nil, err
	}
	var out []Version
	for _, version := range versions {
		img, err := artifact.Open(filepath.Join(dir, version))
		v := Version{Image: img, Err: err}
		if err == nil {
			v.Err = img.Verify()
			for _, f := range img.Manifest.Files {
				v.Size += f.Size
			}
		} else {
			v.Image = &artifact.Image{Dir: filepath.Join(dir, version), Manifest: artifact.Manifest{Name: filepath.Base(dir), Version: version}}
		}
		out = append(out, v)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Image.Manifest.Created.Before(out[j].Image.Manifest.Created) })
	return out, nil
}

// readNames is artifact.ReadNames, with no names in a directory that does not exist.
func readNames(dir string) ([]string, error) {
	names, err := artifact.ReadNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return names, err
}

// Change is one package that differs between two versions.
type Change struct {
	Name     string
	From, To string // NEVRA without the name; "" when absent
}

// Diff compares the packages of two versions of image name, from the locks they carry.
func Diff(outDir, name, a, b string) ([]Change, error) {
	pa, err := packagesOf(filepath.Join(outDir, name, a))
	if err != nil {
		return nil, err
	}
	pb, err := packagesOf(filepath.Join(outDir, name, b))
	if err != nil {
		return nil, err
	}
	var changes []Change
	for _, n := range unionKeys(pa, pb) {
		if pa[n] != pb[n] {
			changes = append(changes, Change{Name: n, From: pa[n], To: pb[n]})
		}
	}
	return changes, nil
}

// packagesOf maps package name -> epoch:version-release.arch from a version's lock.json.
func packagesOf(dir string) (map[string]string, error) {
	img, err := artifact.Open(dir)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(img.Manifest.Extras, "lock.json") {
		return nil, fmt.Errorf("%s carries no lock.json: built by something other than imgbuild?", dir)
	}
	lock, err := resolve.Read(filepath.Join(dir, "lock.json"))
	if err != nil {
		return nil, err
	}
	pkgs := map[string]string{}
	for _, l := range lock.Layers {
		for _, p := range l.Packages {
			pkgs[p.Name] = fmt.Sprintf("%d:%s-%s.%s", p.Epoch, p.Version, p.Release, p.Arch)
		}
	}
	return pkgs, nil
}

func unionKeys(a, b map[string]string) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}
