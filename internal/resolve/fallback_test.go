package resolve

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/labcluster/gpucluster/internal/rpmcmd"
)

// TestFetchFallback: a package the mirror no longer has comes from the lock's archive URL or
// from the package archive, which is tried first; bytes that are not the locked ones are refused
// from every source; the error names each source tried.
func TestFetchFallback(t *testing.T) {
	good, other := []byte("the locked package"), []byte("another package")
	tests := []struct {
		name    string
		files   map[string][]byte // served path -> content
		archive bool              // the lock records /vault/a.rpm
		pkgDir  bool              // a package archive at /archive/
		want    []string          // paths asked, in order
		wantErr string
	}{
		{"the mirror has it", map[string][]byte{"/pub/Packages/a.rpm": good}, true, false,
			[]string{"/pub/Packages/a.rpm"}, ""},
		{"gone from the mirror: the vault", map[string][]byte{"/vault/a.rpm": good}, true, false,
			[]string{"/pub/Packages/a.rpm", "/vault/a.rpm"}, ""},
		{"the mirror changed it: the vault", map[string][]byte{"/pub/Packages/a.rpm": other, "/vault/a.rpm": good}, true, false,
			[]string{"/pub/Packages/a.rpm", "/vault/a.rpm"}, ""},
		{"the package archive first", map[string][]byte{"/archive/" + sha(good) + ".rpm": good, "/pub/Packages/a.rpm": good}, true, true,
			[]string{"/archive/" + sha(good) + ".rpm"}, ""},
		{"not in the package archive", map[string][]byte{"/pub/Packages/a.rpm": good}, true, true,
			[]string{"/archive/" + sha(good) + ".rpm", "/pub/Packages/a.rpm"}, ""},
		{"gone everywhere", map[string][]byte{}, true, true,
			[]string{"/archive/" + sha(good) + ".rpm", "/pub/Packages/a.rpm", "/vault/a.rpm"},
			"no source has it:\nfetch URL/archive/" + sha(good) + ".rpm: 404 Not Found\nfetch URL/pub/Packages/a.rpm: 404 Not Found\nfetch URL/vault/a.rpm: 404 Not Found"},
		{"no archive recorded", map[string][]byte{"/vault/a.rpm": good}, false, false,
			[]string{"/pub/Packages/a.rpm"}, "fetch URL/pub/Packages/a.rpm: 404 Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var asked []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				asked = append(asked, r.URL.Path)
				mu.Unlock()
				if b, ok := tt.files[r.URL.Path]; ok {
					w.Write(b)
					return
				}
				http.NotFound(w, r)
			}))
			t.Cleanup(srv.Close)
			l := oneLock(srv.URL+"/pub/", good)
			if tt.archive {
				l.Layers[0].Packages[0].Archive = srv.URL + "/vault/a.rpm"
			}
			src := Sources{}
			if tt.pkgDir {
				src.PackageArchive = srv.URL + "/archive"
			}
			cache := t.TempDir()
			got, err := Fetch(context.Background(), l, src, cache, nil)
			msg := ""
			if err != nil {
				msg = strings.ReplaceAll(err.Error(), srv.URL, "URL")
			}
			if !strings.Contains(msg, tt.wantErr) || (tt.wantErr == "") != (err == nil) {
				t.Errorf("error %q, want one containing %q", msg, tt.wantErr)
			}
			if strings.Join(asked, " ") != strings.Join(tt.want, " ") {
				t.Errorf("asked %v, want %v", asked, tt.want)
			}
			if err == nil {
				b, _ := os.ReadFile(got[l.Packages()[0].NEVRA()])
				if string(b) != string(good) {
					t.Errorf("cached %q, want the locked bytes", b)
				}
			}
		})
	}
}

// TestFetchPackageArchiveDir: the package archive may be a plain directory.
func TestFetchPackageArchiveDir(t *testing.T) {
	good := []byte("the locked package")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, sha(good)+".rpm"), good, 0o644); err != nil {
		t.Fatal(err)
	}
	l := oneLock("file:///nonexistent/", good)
	if _, err := Fetch(context.Background(), l, Sources{PackageArchive: dir}, t.TempDir(), nil); err != nil {
		t.Fatal(err)
	}
}

func TestSplitSourceRPM(t *testing.T) {
	for in, want := range map[string]string{
		"slurm-22.05.9-1.el9.src.rpm":          "slurm 22.05.9 1.el9",
		"python-pyasn1-0.4.8-6.el9.src.rpm":    "python-pyasn1 0.4.8 6.el9",
		"kernel-5.14.0-570.12.1.el9_6.src.rpm": "kernel 5.14.0 570.12.1.el9_6",
		"cuda-toolkit-12-6-12.6.3-1.nosrc.rpm": "cuda-toolkit-12-6 12.6.3 1",
		"(none)":                               "",
		"a-1.src.rpm":                          "",
	} {
		n, v, r, ok := splitSourceRPM(in)
		got := ""
		if ok {
			got = n + " " + v + " " + r
		}
		if got != want {
			t.Errorf("splitSourceRPM(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestKeyFailure recognises dnf 4's signature failures (its own words, as it printed them here)
// and blames the first repo with the key URL it names.
func TestKeyFailure(t *testing.T) {
	r := &resolver{env: &rpmcmd.Env{Repos: []rpmcmd.Repo{
		{ID: "a", GPGKey: "https://dl.example/KEY-A"}, {ID: "b", GPGKey: "https://dl.example/KEY-B"}, {ID: "c", GPGKey: "https://dl.example/KEY-A"},
	}}}
	tests := []struct{ name, stderr, want string }{
		{"key not fetched", "Curl error (22): The requested URL returned error: 404 for https://dl.example/KEY-B [...]\n", "b  https://dl.example/KEY-B"},
		{"wrong key", " From       : /x\nPublic key for a-1-1.noarch.rpm is not installed. Failing package is: a-1-1.noarch\n GPG Keys are configured as: https://dl.example/KEY-A\nError: GPG check FAILED\n", "a a-1-1.noarch https://dl.example/KEY-A"},
		{"key gone", "Status code: 404 for https://dl.example/KEY-A (IP: 10.83.0.1)\n", "a  https://dl.example/KEY-A"},
		{"another failure", "Error: Unable to find a match: x\n", ""},
		{"a key URL in passing", "Curl error (6): Could not resolve host: mirror.example for https://mirror.example/repodata/repomd.xml\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if ke := r.keyFailure(tt.stderr); ke != nil {
				got = ke.Repo + " " + ke.Package + " " + ke.URL
			}
			if got != tt.want {
				t.Errorf("keyFailure = %q, want %q", got, tt.want)
			}
		})
	}
}

func sha(b []byte) string { return oneLock("", b).Layers[0].Packages[0].SHA256 }
