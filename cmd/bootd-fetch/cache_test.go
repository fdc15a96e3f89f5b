package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labcluster/gpucluster/internal/castr"
	"github.com/labcluster/gpucluster/internal/rootfetch"
)

func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestRootCache runs `bootd-fetch root --cache` as a node with a cache disk would, boot after
// boot, against a bootd stand-in serving the versions' files and chunks (counting what it sends):
// the first boot fetches, the second fetches nothing, a damaged cache fetches the chunk that was
// damaged (the rest of the copy checks out, chunk by chunk), a new
// version costs its changed chunks, and the last two versions are kept.
func TestRootCache(t *testing.T) {
	images := t.TempDir()
	v1 := randomBytes(1, 3<<20)
	v2 := append(append(append([]byte{}, v1[:1<<20]...), randomBytes(2, 256<<10)...), v1[1<<20:]...)
	v3 := append(append([]byte{}, v2...), randomBytes(3, 128<<10)...)
	var sent atomic.Int64
	files := http.FileServer(http.Dir(images))
	chunks := http.StripPrefix("/chunks", http.FileServer(http.Dir(castr.StorePath(images))))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &counting{ResponseWriter: w, n: &sent}
		switch {
		case strings.HasPrefix(r.URL.Path, "/chunks/"):
			chunks.ServeHTTP(cw, r)
		case strings.HasPrefix(r.URL.Path, "/api/"):
			w.WriteHeader(http.StatusNoContent)
		default:
			files.ServeHTTP(cw, r)
		}
	}))
	defer srv.Close()
	cmdlines := map[string]string{}
	for name, data := range map[string][]byte{"1": v1, "2": v2, "3": v3} {
		dir := filepath.Join(images, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "rootfs.squashfs"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := castr.Chunk(context.Background(), filepath.Join(dir, "rootfs.squashfs"), images, filepath.Join(dir, castr.IndexFile)); err != nil {
			t.Fatal(err)
		}
		ib, _ := os.ReadFile(filepath.Join(dir, castr.IndexFile))
		cl := filepath.Join(t.TempDir(), "cmdline")
		line := "ip=127.0.0.1::::c1::none bootd=" + srv.URL + " root=live:" + srv.URL + "/" + name + "/rootfs.squashfs rd.bootd.sha256=" + sum(data) +
			" rd.bootd.index=" + srv.URL + "/" + name + "/" + castr.IndexFile + " rd.bootd.index.sha256=" + sum(ib)
		if err := os.WriteFile(cl, []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
		cmdlines[name] = cl
	}
	cache := filepath.Join(t.TempDir(), "cache")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	c := rootfetch.Cache{Dir: cache}
	boot := func(t *testing.T, version string) (rootfetch.Stats, int64) {
		t.Helper()
		stats := filepath.Join(t.TempDir(), "stats.json")
		before := sent.Load()
		if err := root([]string{"--cache", cache, "--cmdline", cmdlines[version], "--stats", stats}); err != nil {
			t.Fatal(err)
		}
		var st rootfetch.Stats
		b, _ := os.ReadFile(stats)
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		return st, sent.Load() - before
	}
	v1sum, v2sum, v3sum := sum(v1), sum(v2), sum(v3)
	cases := []struct {
		name, version string
		before        func(t *testing.T)
		maxSent       int64
		minSent       int64
		cached        bool
		held          []string
	}{
		{"first boot fetches", "1", nil, int64(len(v1)) + 1<<16, int64(len(v1)), false, []string{v1sum}},
		{"second boot fetches nothing", "1", nil, 1 << 16, 0, true, []string{v1sum}},
		{"damaged cache fetched again", "1", func(t *testing.T) {
			f, err := os.OpenFile(c.Image(v1sum), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt([]byte("damage"), 4096)
			f.Close()
		}, castr.MaxSize + 1<<16, 1, false, []string{v1sum}}, // only the damaged chunk
		{"new version costs its changed chunks", "2", nil, 256<<10 + 2*castr.MaxSize + 1<<16, 256 << 10, false, []string{v2sum, v1sum}},
		{"the last two are kept", "3", nil, 128<<10 + 2*castr.MaxSize + 1<<16, 128 << 10, false, []string{v3sum, v2sum}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before(t)
			}
			st, n := boot(t, tc.version)
			t.Logf("bootd sent %d bytes; stats %+v", n, st)
			if st.Cached != tc.cached {
				t.Errorf("cache hit %v, want %v", st.Cached, tc.cached)
			}
			if n < tc.minSent || n > tc.maxSent {
				t.Errorf("bootd sent %d bytes, want %d to %d", n, tc.minSent, tc.maxSent)
			}
			var held []string
			for _, s := range c.Seeds("") {
				held = append(held, strings.TrimSuffix(filepath.Base(s.File), ".img"))
			}
			if strings.Join(held, ",") != strings.Join(tc.held, ",") {
				t.Errorf("cache holds %v, want %v (newest first)", held, tc.held)
			}
		})
	}
}

type counting struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *counting) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(n))
	return n, err
}
