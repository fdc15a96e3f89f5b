package resolve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/labcluster/gpucluster/internal/sha256hex"
	"golang.org/x/sync/errgroup"
)

// fetchWorkers bounds parallel downloads: enough to hide latency to a
// mirror, few enough not to hammer it.
const fetchWorkers = 4

// partialPrefix names a download in progress, beside the cache entries it
// becomes (Partials).
const partialPrefix = ".partial-"

// MismatchError is a package whose bytes are not the locked ones.
type MismatchError struct {
	NEVRA string
	URL   string
	Want  string // sha256 in the lock
	Got   string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("package %s from %s: sha256 mismatch: the lock says %s, the file has %s (the mirror changed, or the lock is out of date)",
		e.NEVRA, e.URL, e.Want, e.Got)
}

// Sources are where Fetch looks for a package that is not in the cache, in this order: the
// package archive, the repo's baseurl + location, the package's own archive URL (the lock's:
// Rocky's vault, Koji), each until one gives the locked bytes.
type Sources struct {
	// BaseURLs maps repo ids to the baseurl to fetch from now (site overrides applied); a repo
	// not in it uses the baseurl recorded in the lock.
	BaseURLs map[string]string
	// PackageArchive, when set, is a directory or URL holding <sha256>.rpm files: the packages
	// CI published beside the image versions it built (ci/build-images.sh --publish).
	PackageArchive string
}

// Fetch makes every package of the lock available in cacheDir and returns
// NEVRA -> cached file, from src (see Sources). file://, http:// and https:// are supported.
// progress, if not nil, is called (serially) with the number of packages done and the total.
func Fetch(ctx context.Context, l *LockFile, src Sources, cacheDir string, progress func(done, total int64)) (map[string]string, error) {
	dir := filepath.Join(cacheDir, "sha256")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	bases := map[string]string{}
	for _, r := range l.Repos {
		bases[r.ID] = r.BaseURL
	}
	for id, u := range src.BaseURLs {
		bases[id] = u
	}
	pkgs := l.Packages()
	f := &fetcher{dir: dir, bases: bases, archive: src.PackageArchive, progress: progress, total: int64(len(pkgs)),
		out: make(map[string]string, len(pkgs)), client: newHTTPClient()}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fetchWorkers)
	for _, p := range pkgs {
		g.Go(func() error { return f.one(gctx, p) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return f.out, nil
}

type fetcher struct {
	dir      string
	bases    map[string]string
	archive  string // Sources.PackageArchive
	progress func(done, total int64)
	client   *http.Client

	mu    sync.Mutex
	done  int64
	total int64
	out   map[string]string
	// busy serialises work on one cache entry, should two packages share
	// content.
	busy sync.Map
}

func (f *fetcher) one(ctx context.Context, p Package) error {
	lock, _ := f.busy.LoadOrStore(p.SHA256, &sync.Mutex{})
	lock.(*sync.Mutex).Lock()
	defer lock.(*sync.Mutex).Unlock()
	dst := filepath.Join(f.dir, p.SHA256+".rpm")
	ok, err := cachedOK(dst, p.SHA256)
	if err != nil {
		return err
	}
	if !ok {
		if err := f.download(ctx, p, dst); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.out[p.NEVRA()] = dst
	f.done++
	if f.progress != nil {
		f.progress(f.done, f.total)
	}
	return nil
}

// cachedOK hashes a cache entry again: the name is only a claim. An entry
// that does not match is removed, so it is fetched again.
func cachedOK(p, want string) (bool, error) {
	got, err := sha256hex.File(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cache: %w", err)
	}
	if got == want {
		return true, nil
	}
	if err := os.Remove(p); err != nil {
		return false, fmt.Errorf("cache: remove damaged %s: %w", p, err)
	}
	return false, nil
}

// download tries the package's sources in order (Sources) until one gives the locked bytes.
// The error, when none does, says what each gave.
func (f *fetcher) download(ctx context.Context, p Package, dst string) error {
	base, ok := f.bases[p.Repo]
	if !ok {
		return fmt.Errorf("package %s: repo %q has no baseurl", p.NEVRA(), p.Repo)
	}
	var urls []string
	if f.archive != "" {
		urls = append(urls, strings.TrimSuffix(f.archive, "/")+"/"+p.SHA256+".rpm")
	}
	urls = append(urls, strings.TrimSuffix(base, "/")+"/"+p.Location)
	if p.Archive != "" {
		urls = append(urls, p.Archive)
	}
	var errs []error
	for _, u := range urls {
		err := f.downloadFrom(ctx, p, u, dst)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return &sourcesError{nevra: p.NEVRA(), errs: errs}
}

// sourcesError is a package that no source gave: what each said, one a line.
type sourcesError struct {
	nevra string
	errs  []error
}

func (e *sourcesError) Error() string {
	lines := make([]string, len(e.errs))
	for i, err := range e.errs {
		lines[i] = strings.TrimPrefix(err.Error(), "package "+e.nevra+": ")
	}
	return "package " + e.nevra + ": no source has it:\n" + strings.Join(lines, "\n")
}

func (e *sourcesError) Unwrap() []error { return e.errs }

// downloadFrom writes the package from u to a temporary file next to dst, hashing as it goes,
// and renames it into place only when the sha256 matches.
func (f *fetcher) downloadFrom(ctx context.Context, p Package, u, dst string) error {
	body, err := f.open(ctx, u)
	if err != nil {
		return fmt.Errorf("package %s: %w", p.NEVRA(), err)
	}
	defer body.Close()
	tmp, err := os.CreateTemp(f.dir, partialPrefix+"*")
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	got, _, err := sha256hex.Of(io.TeeReader(body, tmp))
	if err != nil {
		tmp.Close()
		return fmt.Errorf("package %s: fetch %s: %w", p.NEVRA(), u, err)
	}
	if got != p.SHA256 {
		tmp.Close()
		return &MismatchError{NEVRA: p.NEVRA(), URL: u, Want: p.SHA256, Got: got}
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	return nil
}

func (f *fetcher) open(ctx context.Context, raw string) (io.ReadCloser, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("url %q: %w", raw, err)
	}
	switch u.Scheme {
	case "file", "":
		if u.Scheme == "" && !filepath.IsAbs(raw) {
			return nil, fmt.Errorf("url %q: want file://, http:// or https://, or an absolute path", raw)
		}
		fh, err := os.Open(u.Path)
		if err != nil {
			return nil, fmt.Errorf("fetch %s: %w", raw, err)
		}
		return fh, nil
	case "http", "https":
		return httpGet(ctx, f.client, raw)
	}
	return nil, fmt.Errorf("url %q: scheme %q not supported (file, http, https)", raw, u.Scheme)
}
