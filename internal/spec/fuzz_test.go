package spec

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/labcluster/gpucluster/internal/tomlpos"
)

// FuzzLoadLayer feeds LoadLayer arbitrary layer files: it must not panic,
// every error must be located in the file, and whatever it accepts must
// keep the schema's promises and load again to the same digest. The
// corpus under testdata/fuzz/FuzzLoadLayer seeds it, with the bad test
// files and the repository's layers added here.
func FuzzLoadLayer(f *testing.F) {
	bad, _ := filepath.Glob("testdata/bad/*.toml")
	real, _ := filepath.Glob(filepath.Join(layersDir, "*.toml"))
	for _, file := range append(bad, real...) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	dir := f.TempDir()
	writeFiles(f, dir, map[string]string{"files/a": "a\n"})
	path := filepath.Join(dir, "fuzz.toml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := LoadLayer(path)
		if err != nil {
			var e *tomlpos.Error
			if !errors.As(err, &e) || e.File != path || e.Line < 1 {
				t.Errorf("error %q is not located in the file", err)
			}
			return
		}
		checkLayer(t, l)
		again, err := LoadLayer(path)
		if err != nil || again.Digest != l.Digest {
			t.Errorf("second load: %v, digest %s then %s", err, l.Digest, again.Digest)
		}
	})
}

// checkLayer checks what a loaded layer promises.
func checkLayer(t *testing.T, l *Layer) {
	t.Helper()
	if l.Name != "fuzz" || len(l.Digest) != 64 {
		t.Errorf("name %q, digest %q", l.Name, l.Digest)
	}
	files := l.Files
	for _, p := range l.Roles {
		files = append(files, p.Files...)
	}
	for _, f := range files {
		if checkImagePath(f.Path) != "" || f.Mode&^(0o777|os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
			t.Errorf("file %+v", f)
		}
		if f.Source != "" && !filepath.IsAbs(f.LayersDir) {
			t.Errorf("file %+v has no absolute source path", f)
		}
	}
	for _, u := range l.Users {
		if checkID(u.UID) != "" || checkID(u.GID) != "" || checkComment(u.Comment) != "" ||
			u.Home != "" && checkPasswdPath(u.Home) != "" || u.Shell != "" && checkPasswdPath(u.Shell) != "" {
			t.Errorf("user %+v", u)
		}
	}
	for _, r := range l.Repos {
		if r.ID == "" || r.BaseURL == "" {
			t.Errorf("repo %+v", r)
		}
	}
}
