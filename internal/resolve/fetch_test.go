package resolve

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/sha256hex"
	"github.com/labcluster/gpucluster/internal/testkit/testhook"
)

// oneLock locks one package, content, at Packages/a.rpm of the repo at baseURL.
func oneLock(baseURL string, content []byte) *LockFile {
	p := Package{Name: "a", Version: "1.0", Release: "1.el9", Arch: "noarch", Repo: "baseos",
		Location: "Packages/a.rpm", SHA256: sha256hex.OfBytes(content)}
	return &LockFile{Repos: []LockRepo{{ID: "baseos", BaseURL: baseURL}}, Layers: []LockLayer{{Name: "base", Packages: []Package{p}}}}
}

// TestFetchStalledMirror: a loopback mirror that stops sending fails the download within the
// stall timeout, with an error naming the package, its URL and the stall; one that is slow but
// never silent that long is waited for.
func TestFetchStalledMirror(t *testing.T) {
	testhook.Set(t, &stallTimeout, 500*time.Millisecond)
	content := bytes.Repeat([]byte("rpm bytes "), 200)
	for _, tt := range []struct {
		name    string
		serve   func(w http.ResponseWriter, r *http.Request, release <-chan struct{})
		wantErr string // "": the download succeeds
	}{
		{"headers and a few bytes, then silence", func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
			w.Header().Set("Content-Length", strconv.Itoa(len(content)))
			w.Write(content[:10])
			w.(http.Flusher).Flush()
			wait(r, release)
		}, "no byte for 500ms"},
		{"no response headers", func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
			wait(r, release)
		}, "timeout awaiting response headers"},
		{"slow but steady", func(w http.ResponseWriter, r *http.Request, release <-chan struct{}) {
			w.Header().Set("Content-Length", strconv.Itoa(len(content)))
			for chunk := range slices.Chunk(content, len(content)/20) { // 1s in all, twice the stall timeout
				time.Sleep(50 * time.Millisecond)
				w.Write(chunk)
				w.(http.Flusher).Flush()
			}
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tt.serve(w, r, release) }))
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(release) }) // first: lets a handler that still waits end
			l, cache := oneLock(srv.URL+"/", content), t.TempDir()
			err := fetchWithin(t, 10*time.Second, l, cache)
			p := l.Layers[0].Packages[0]
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			t.Log(msg)
			for _, want := range []string{p.NEVRA(), srv.URL + "/Packages/a.rpm", "stalled", tt.wantErr} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not say %q", msg, want)
				}
			}
			if !errors.Is(err, ErrStalled) {
				t.Errorf("error %v is not ErrStalled", err)
			}
			if left, _ := os.ReadDir(filepath.Join(cache, "sha256")); len(left) > 0 {
				t.Errorf("cache keeps %v after a stalled download", left)
			}
		})
	}
}

// fetchWithin fetches l into cache and fails the test if that takes longer than limit.
func fetchWithin(t *testing.T, limit time.Duration, l *LockFile, cache string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := Fetch(context.Background(), l, Sources{}, cache, nil)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("Fetch still waiting after %s", limit)
		return nil
	}
}

// wait blocks a handler until the client goes away or the test ends.
func wait(r *http.Request, release <-chan struct{}) {
	select {
	case <-r.Context().Done():
	case <-release:
	}
}
