package spec

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/labcluster/gpucluster/internal/tomlpos"
)

// fuzzSeeds adds every file matching the globs to f's corpus.
func fuzzSeeds(f *testing.F, globs ...string) {
	for _, g := range globs {
		files, _ := filepath.Glob(g)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
}

// located fails t unless err is a tomlpos.Error naming path and a line.
func located(t *testing.T, err error, path string) {
	t.Helper()
	var e *tomlpos.Error
	if !errors.As(err, &e) || e.File != path || e.Line < 1 {
		t.Errorf("error %q is not located in the file", err)
	}
}

// FuzzLoadImage feeds LoadImage arbitrary image files (images/<name>.toml): no panic, every
// error located in the file, and an accepted image keeps the schema's promises. Seeds: the
// repository's images, the bad test images, and testdata/fuzz/FuzzLoadImage.
func FuzzLoadImage(f *testing.F) {
	fuzzSeeds(f, filepath.Join(imagesDir, "*.toml"), "testdata/bad/image_*.toml")
	path := filepath.Join(f.TempDir(), "compute.toml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		img, err := LoadImage(path)
		if err != nil {
			located(t, err, path)
			return
		}
		if img.Name != "compute" || !slices.Contains(roleNames, img.Role) || len(img.Layers) == 0 {
			t.Errorf("accepted image %+v", img)
		}
		for _, l := range img.Layers {
			if checkName(l) != "" {
				t.Errorf("accepted layer name %q", l)
			}
		}
		for _, a := range img.KernelArgs {
			if checkKernelArg(a) != "" {
				t.Errorf("accepted kernel argument %q", a)
			}
		}
	})
}

// FuzzLoadSite feeds LoadSite arbitrary site files (--site): no panic, every error located, and
// an accepted site names only valid repository ids and URLs.
func FuzzLoadSite(f *testing.F) {
	fuzzSeeds(f, "testdata/bad/site_*.toml", "testdata/*site*.toml")
	f.Add([]byte("[repos.epel]\nbaseurl = \"file:///srv/mirror/epel/\"\ngpgcheck = false\n"))
	path := filepath.Join(f.TempDir(), "site.toml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := LoadSite(path)
		if err != nil {
			located(t, err, path)
			return
		}
		for id, o := range s.Repos {
			if checkRepoID(id) != "" {
				t.Errorf("accepted repo id %q", id)
			}
			if o.BaseURL != nil && checkURL(*o.BaseURL) != "" {
				t.Errorf("accepted baseurl %q", *o.BaseURL)
			}
		}
	})
}
