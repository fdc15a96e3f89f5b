package resolve_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/resolve"
	"github.com/labcluster/gpucluster/internal/rpmcmd"
	"github.com/labcluster/gpucluster/internal/sha256hex"
	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
)

// fixture is a repository with a -> b -> bash (-> filesystem -> setup) and
// c, an unrelated package.
func fixture(t *testing.T) string {
	t.Helper()
	repo := t.TempDir()
	pkgs := append(testrepo.Standins([]string{"bash"}, testrepo.KernelFiles{}),
		testrepo.Package{Name: "a", Requires: []string{"b"}, Files: map[string]string{"/usr/share/a/hello": "a\n"}},
		testrepo.Package{Name: "b", Version: "2.1", Requires: []string{"bash"}, Files: map[string]string{"/usr/share/b/hello": "b\n"}},
		testrepo.Package{Name: "c", Files: map[string]string{"/usr/share/c/hello": "c\n"}},
	)
	if err := testrepo.Build(testrepo.Context(t), repo, pkgs); err != nil {
		t.Fatal(err)
	}
	return repo
}

const specDigest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

// request is a two-layer image. The repo keeps its real id and name; only
// the baseurl is the local directory, as a site override would make it.
func request(repo string, appPkgs ...string) resolve.Request {
	baseos := rpmcmd.Repo{ID: "baseos", Name: "Rocky Linux 9 - BaseOS", BaseURL: "file://" + repo + "/"}
	return resolve.Request{
		Image: "compute", SpecDigest: specDigest, ReleaseVer: "9", Arch: "x86_64",
		SourceDateEpoch: 1700000000,
		Layers: []resolve.Layer{
			{Name: "base", Digest: "sha256:aa", Repos: []rpmcmd.Repo{baseos}, Packages: []string{"bash"}},
			{Name: "app", Digest: "sha256:bb", Packages: appPkgs},
		},
	}
}

func names(ps []resolve.Package) string {
	var n []string
	for _, p := range ps {
		n = append(n, p.Name)
	}
	return strings.Join(n, " ")
}

func fileHash(t *testing.T, p string) string {
	t.Helper()
	sum, err := sha256hex.File(p)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func lockFixture(t *testing.T, repo string) *resolve.LockFile {
	t.Helper()
	l, err := resolve.Lock(testrepo.Context(t), request(repo, "a"), t.TempDir(), testrepo.QuietLog())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLockSplitsLayers(t *testing.T) {
	testrepo.NeedTools(t, "dnf")
	repo := fixture(t)
	l := lockFixture(t, repo)
	want := []struct{ layer, pkgs string }{
		{"base", "bash filesystem setup"},
		{"app", "a b"},
	}
	if len(l.Layers) != len(want) {
		t.Fatalf("%d layers, want %d", len(l.Layers), len(want))
	}
	for i, w := range want {
		ly := l.Layers[i]
		if ly.Name != w.layer || names(ly.Packages) != w.pkgs {
			t.Errorf("layer %d: %s [%s], want %s [%s]", i, ly.Name, names(ly.Packages), w.layer, w.pkgs)
		}
	}
	for _, ly := range l.Layers {
		for _, p := range ly.Packages {
			if p.Repo != "baseos" {
				t.Errorf("%s: repo %q", p.Name, p.Repo)
			}
			wantLoc := "Packages/" + p.Name[:1] + "/" + p.Name + "-" + p.Version + "-" + p.Release + "." + p.Arch + ".rpm"
			if p.Location != wantLoc {
				t.Errorf("%s: location %q, want %q", p.Name, p.Location, wantLoc)
			}
			if got := fileHash(t, filepath.Join(repo, p.Location)); got != p.SHA256 {
				t.Errorf("%s: sha256 %s, file has %s", p.Name, p.SHA256, got)
			}
		}
	}
	b := l.Layers[1].Packages[1]
	if b.NEVRA() != "b-0:2.1-1.el9.noarch" {
		t.Errorf("b: NEVRA %s", b.NEVRA())
	}
	if len(l.Repos) != 1 || l.Repos[0].BaseURL != "file://"+repo+"/" {
		t.Errorf("repos: %+v", l.Repos)
	}
}

func TestLockIsDeterministic(t *testing.T) {
	testrepo.NeedTools(t, "dnf")
	repo := fixture(t)
	dir := t.TempDir()
	var files [][]byte
	for i, name := range []string{"one.lock.json", "two.lock.json"} {
		l := lockFixture(t, repo)
		p := filepath.Join(dir, name)
		if err := l.Write(p); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, data)
		back, err := resolve.Read(p)
		if err != nil {
			t.Fatalf("lock %d: read back: %v", i, err)
		}
		if back.Digest() != l.Digest() {
			t.Errorf("lock %d: digest changed by a write and read", i)
		}
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Errorf("two locks differ:\n%s\n%s", files[0], files[1])
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("write left %d files, want 2 (no temporaries)", len(entries))
	}
}

func TestLockMissingPackage(t *testing.T) {
	testrepo.NeedTools(t, "dnf")
	repo := fixture(t)
	_, err := resolve.Lock(testrepo.Context(t), request(repo, "a", "nosuch"), t.TempDir(), testrepo.QuietLog())
	if err == nil {
		t.Fatal("lock succeeded with a package no repo has")
	}
	for _, want := range []string{`layer app: package "nosuch" not found in repos baseos`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func cacheFiles(t *testing.T, cache string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(cache, "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestFetch(t *testing.T) {
	testrepo.NeedTools(t, "dnf")
	repo := fixture(t)
	l := lockFixture(t, repo)
	cache := t.TempDir()
	ctx := testrepo.Context(t)
	var calls, lastDone, lastTotal int64
	got, err := resolve.Fetch(ctx, l, resolve.Sources{}, cache, func(done, total int64) { calls, lastDone, lastTotal = calls+1, done, total })
	if err != nil {
		t.Fatal(err)
	}
	if calls != 5 || lastDone != 5 || lastTotal != 5 {
		t.Errorf("progress: %d calls, last %d/%d; want 5 calls ending 5/5", calls, lastDone, lastTotal)
	}
	for _, ly := range l.Layers {
		for _, p := range ly.Packages {
			path := got[p.NEVRA()]
			if want := filepath.Join(cache, "sha256", p.SHA256+".rpm"); path != want {
				t.Errorf("%s: cached at %q, want %q", p.Name, path, want)
			}
			if fileHash(t, path) != p.SHA256 {
				t.Errorf("%s: cached file does not match", p.Name)
			}
		}
	}

	// A tampered cache entry is detected, dropped and fetched again.
	victim := got[l.Layers[1].Packages[0].NEVRA()]
	if err := os.WriteFile(victim, []byte("not an rpm"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := resolve.Fetch(ctx, l, resolve.Sources{}, cache, nil); err != nil {
		t.Fatal(err)
	}
	if fileHash(t, victim) != l.Layers[1].Packages[0].SHA256 {
		t.Error("tampered cache entry was used, not refetched")
	}
	if n := len(cacheFiles(t, cache)); n != 5 {
		t.Errorf("cache holds %d files, want 5: %v", n, cacheFiles(t, cache))
	}
}

func TestFetchRefusesChangedPackage(t *testing.T) {
	testrepo.NeedTools(t, "dnf")
	repo := fixture(t)
	l := lockFixture(t, repo)
	// The mirror's b no longer has the locked bytes.
	b := l.Layers[1].Packages[1]
	f, err := os.OpenFile(filepath.Join(repo, b.Location), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("x"))
	f.Close()
	cache := t.TempDir()
	_, err = resolve.Fetch(testrepo.Context(t), l, resolve.Sources{}, cache, nil)
	var mm *resolve.MismatchError
	if !errors.As(err, &mm) {
		t.Fatalf("err %v, want a sha256 mismatch", err)
	}
	msg := err.Error()
	for _, want := range []string{b.NEVRA(), "file://" + repo + "/" + b.Location, b.SHA256, mm.Got} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
	for _, name := range cacheFiles(t, cache) {
		if strings.HasPrefix(name, ".") || name == b.SHA256+".rpm" {
			t.Errorf("cache keeps %s after a refused download", name)
		}
	}
}

// TestFetchHTTPSiteOverride fetches from a loopback HTTP mirror given as
// the repo's site baseurl, not the one in the lock.
func TestFetchHTTPSiteOverride(t *testing.T) {
	testrepo.NeedTools(t, "dnf")
	repo := fixture(t)
	l := lockFixture(t, repo)
	mirror := filepath.Join(t.TempDir(), "mirror")
	if out, err := exec.Command("cp", "-a", repo, mirror).CombinedOutput(); err != nil {
		t.Fatalf("copy repo: %v\n%s", err, out)
	}
	os.RemoveAll(filepath.Join(repo, "Packages")) // the lock's file:// url must not be used
	srv := httptest.NewServer(http.FileServer(http.Dir(mirror)))
	defer srv.Close()
	got, err := resolve.Fetch(testrepo.Context(t), l, resolve.Sources{BaseURLs: map[string]string{"baseos": srv.URL + "/"}}, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Errorf("fetched %d packages, want 5", len(got))
	}
}

// TestLockPinsEarlierLayers: a later layer's repo has a newer b, but b stays
// at the version the base layer locked; a package that needs the newer one
// is an error, not a silent change to the base layer.
func TestLockPinsEarlierLayers(t *testing.T) {
	testrepo.NeedTools(t, "dnf")
	repo := fixture(t)
	updates := t.TempDir()
	err := testrepo.Build(testrepo.Context(t), updates, []testrepo.Package{
		{Name: "b", Version: "3.0", Requires: []string{"bash"}},
		{Name: "d", Requires: []string{"b >= 3.0"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	req := request(repo, "a")
	req.Layers[0].Packages = []string{"b"}
	req.Layers[1].Repos = []rpmcmd.Repo{{ID: "updates", BaseURL: "file://" + updates}}
	l, err := resolve.Lock(testrepo.Context(t), req, t.TempDir(), testrepo.QuietLog())
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Layers[0].Packages[0].NEVRA(); got != "b-0:2.1-1.el9.noarch" {
		t.Errorf("base layer b: %s", got)
	}
	if got := names(l.Layers[1].Packages); got != "a" {
		t.Errorf("app layer: %q, want only a", got)
	}
	req.Layers[1].Packages = []string{"d"}
	_, err = resolve.Lock(testrepo.Context(t), req, t.TempDir(), testrepo.QuietLog())
	if err == nil || !strings.Contains(err.Error(), "layer app") {
		t.Errorf("err %v, want a resolve failure of layer app", err)
	}
	t.Log(err)
}

// TestLockStreamEnabledLast: a last layer that only enables a module stream holding another
// version of a package an earlier layer locked must not hide the locked one from the lookup of
// its repository and location (modular filtering would: the lookup runs after the last layer).
func TestLockStreamEnabledLast(t *testing.T) {
	testrepo.NeedTools(t, "dnf", "modifyrepo_c")
	ctx := testrepo.Context(t)
	repo, extra := t.TempDir(), t.TempDir()
	if err := testrepo.Build(ctx, repo, []testrepo.Package{{Name: "c", Version: "1.0", Files: map[string]string{"/usr/share/c/hello": "c 1\n"}}}); err != nil {
		t.Fatal(err)
	}
	modular := []testrepo.Package{{Name: "c", Version: "2.0", Files: map[string]string{"/usr/share/c/hello": "c 2\n"}}}
	if err := testrepo.Build(ctx, extra, modular); err != nil {
		t.Fatal(err)
	}
	if err := testrepo.AddModules(ctx, extra, []testrepo.Module{{Name: "cmod", Stream: "s", Packages: []string{"c"}}}, modular); err != nil {
		t.Fatal(err)
	}
	req := request(repo)
	req.Layers[0].Packages = []string{"c"}
	req.Layers[1].Repos = []rpmcmd.Repo{{ID: "extra", BaseURL: "file://" + extra}}
	req.Layers[1].Modules = []string{"cmod:s"}
	l, err := resolve.Lock(ctx, req, t.TempDir(), testrepo.QuietLog())
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Layers[0].Packages) != 1 || len(l.Layers[1].Packages) != 0 {
		t.Fatalf("layers: [%s] [%s], want [c] []", names(l.Layers[0].Packages), names(l.Layers[1].Packages))
	}
	c := l.Layers[0].Packages[0]
	if c.NEVRA() != "c-0:1.0-1.el9.noarch" || c.Repo != "baseos" || c.Location != "Packages/c/c-1.0-1.el9.noarch.rpm" {
		t.Errorf("base layer's c: %s from %q at %q, want c-1.0 from baseos at Packages/c/c-1.0-1.el9.noarch.rpm", c.NEVRA(), c.Repo, c.Location)
	}
}
