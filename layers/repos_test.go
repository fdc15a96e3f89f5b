package layers

import (
	"net/url"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/labcluster/gpucluster/internal/spec"
)

// TestShippedRepos holds the shipped layers and images to what a real lab needs: every repo
// checks signatures with a key fetched over https, fetches packages over https, and the images
// pin the Rocky minor release (the vault URLs the lock records depend on it).
func TestShippedRepos(t *testing.T) {
	files, err := filepath.Glob("*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no layers: %v", err)
	}
	for _, f := range files {
		l, err := spec.LoadLayer(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.Repos {
			if !r.GPGCheck || r.GPGKey == "" {
				t.Errorf("%s: repo %s: gpgcheck must stay on, with a gpgkey", f, r.ID)
			}
			for what, raw := range map[string]string{"baseurl": r.BaseURL, "gpgkey": r.GPGKey, "archive": r.Archive} {
				if u, err := url.Parse(raw); raw != "" && (err != nil || u.Scheme != "https") {
					t.Errorf("%s: repo %s: %s %q is not https", f, r.ID, what, raw)
				}
			}
		}
	}
	minor := regexp.MustCompile(`^9\.[0-9]+$`)
	images, _ := filepath.Glob("../images/*.toml")
	for _, f := range images {
		img, err := spec.LoadImage(f)
		if err != nil {
			t.Fatal(err)
		}
		if !minor.MatchString(img.ReleaseVer) {
			t.Errorf("%s: releasever %q does not pin a Rocky 9 minor release (want e.g. \"9.8\")", f, img.ReleaseVer)
		}
	}
	if len(images) == 0 {
		t.Error("no images")
	}
}
