package rootfetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/folbricht/desync"
	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/castr"
)

func random(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// version is one root image published as imgbuild does: file, index, chunks in the store.
type version struct {
	file, index, sha, indexSHA string
	idx                        desync.Index
}

func publish(t *testing.T, images, name string, data []byte) version {
	t.Helper()
	dir := filepath.Join(images, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	v := version{file: filepath.Join(dir, "rootfs.squashfs"), index: filepath.Join(dir, castr.IndexFile)}
	if err := os.WriteFile(v.file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := castr.Chunk(context.Background(), v.file, images, v.index); err != nil {
		t.Fatal(err)
	}
	ib, _ := os.ReadFile(v.index)
	v.sha, v.indexSHA = hexsum(data), hexsum(ib)
	var err error
	if v.idx, err = castr.ReadIndex(v.index); err != nil {
		t.Fatal(err)
	}
	return v
}

func hexsum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// bootdServer serves the images directory as bootd does (index, whole file, /chunks/), counting
// the chunk and whole-file bytes it sent.
type bootdServer struct {
	*httptest.Server
	chunkBytes, wholeBytes atomic.Int64
	// link, when set, is held for a while by each chunk sent: one busy link shared by all.
	link  sync.Mutex
	delay time.Duration
}

func serveBootd(t *testing.T, images string) *bootdServer {
	s := &bootdServer{}
	files := http.FileServer(http.Dir(images))
	chunks := http.StripPrefix("/chunks", http.FileServer(http.Dir(castr.StorePath(images))))
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w}
		if strings.HasPrefix(r.URL.Path, "/chunks/") {
			if s.delay > 0 {
				s.link.Lock()
				time.Sleep(s.delay)
				s.link.Unlock()
			}
			chunks.ServeHTTP(cw, r)
			s.chunkBytes.Add(cw.n)
			return
		}
		files.ServeHTTP(cw, r)
		if strings.HasSuffix(r.URL.Path, ".squashfs") {
			s.wholeBytes.Add(cw.n)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

// servePeer serves a file's chunks as a node does (Serve), with a have-map listing the index
// positions below held (all of them: -1); a lying peer lists every chunk and answers each with junk.
func servePeer(t *testing.T, file string, idx desync.Index, held int, lying bool) string {
	t.Helper()
	if lying {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/have" {
				w.Write(append(bytes.Repeat([]byte{0xff}, haveLen(len(idx.Chunks))), make([]byte, haveLen(len(idx.Chunks)))...))
				return
			}
			w.Write(bytes.Repeat([]byte("not the chunk you asked for "), 100))
		}))
		t.Cleanup(s.Close)
		return s.URL + StorePath
	}
	if held < 0 {
		held = len(idx.Chunks)
	}
	// The peer's own copy of the file, so its have-map is its own.
	own := filepath.Join(t.TempDir(), "peer.img")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(own, data, 0o644); err != nil {
		t.Fatal(err)
	}
	have, err := newHaveMap(own+HaveSuffix, len(idx.Chunks))
	if err != nil {
		t.Fatal(err)
	}
	for pos := 0; pos < held; pos++ {
		have.set(pos)
	}
	have.close()
	file = own
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeIndex(ctx, ln, file, "", idx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("peer: %v", err)
		}
	})
	return "http://" + ln.Addr().String() + StorePath
}

// closedPort is an address where nothing listens: a peer the segment cannot reach.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + StorePath
}

// changedBytes is the size of the chunks of next that prev does not have: what a node holding
// prev must fetch.
func changedBytes(prev, next desync.Index) int64 {
	have := map[desync.ChunkID]bool{}
	for _, c := range prev.Chunks {
		have[c.ID] = true
	}
	var n int64
	seen := map[desync.ChunkID]bool{}
	for _, c := range next.Chunks {
		if !have[c.ID] && !seen[c.ID] {
			n += int64(c.Size)
			seen[c.ID] = true
		}
	}
	return n
}

func TestFetch(t *testing.T) {
	images := t.TempDir()
	v1data := random(1, 6<<20)
	// v2: a layer's 512 KiB of new files in the middle, and a few bytes changed near the end
	// (the squashfs tables).
	v2data := append(append(append([]byte{}, v1data[:3<<20]...), random(2, 512<<10)...), v1data[3<<20:]...)
	copy(v2data[len(v2data)-100:], "new tables")
	v1, v2 := publish(t, images, "1", v1data), publish(t, images, "2", v2data)
	srv := serveBootd(t, images)

	// A node that booted v1 holds it (its RAM copy or cache) with its index.
	held := filepath.Join(t.TempDir(), "held.img")
	if err := os.WriteFile(held, v1data, 0o644); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(t.TempDir(), "corrupt.img")
	bad := append([]byte{}, v1data...)
	for i := 0; i < len(bad); i += 4096 {
		bad[i] ^= 0xff
	}
	if err := os.WriteFile(corrupt, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	delta := changedBytes(v1.idx, v2.idx)
	t.Logf("v2: %d bytes, %d chunks; chunks not in v1: %d bytes", len(v2data), len(v2.idx.Chunks), delta)

	type want struct {
		fromBootdMax, fromBootdMin int64
		fromPeersMin               int64
		whole                      bool
		dropped, setAside          int
	}
	size := int64(len(v2data))
	cases := []struct {
		name  string
		opts  func(o *Options)
		setup func(t *testing.T, o *Options)
		want  want
	}{
		{"no seed, no peers: every chunk from bootd", nil, nil, want{fromBootdMin: size, fromBootdMax: size}},
		{"seeded by the version it holds: only the changed chunks", func(o *Options) { o.Seeds = []Seed{{held, v1.index}} }, nil,
			want{fromBootdMin: delta, fromBootdMax: delta * 12 / 10}},
		{"damaged seed: skipped, chunks from bootd", func(o *Options) { o.Seeds = []Seed{{corrupt, v1.index}} }, nil,
			want{fromBootdMin: size, fromBootdMax: size}},
		{"honest peer holding v2: most from it", nil, func(t *testing.T, o *Options) {
			o.Peers = []string{servePeer(t, v2.file, v2.idx, -1, false)}
		}, want{fromBootdMax: size / 2, fromPeersMin: size / 2}},
		{"peer still fetching: what it holds from it, the rest from bootd", nil, func(t *testing.T, o *Options) {
			o.Peers = []string{servePeer(t, v2.file, v2.idx, len(v2.idx.Chunks)/2, false)}
		}, want{fromBootdMin: size / 3, fromBootdMax: size, fromPeersMin: 1}},
		{"lying peer: dropped, bootd instead", nil, func(t *testing.T, o *Options) {
			o.Peers = []string{servePeer(t, "", v2.idx, -1, true)}
		}, want{fromBootdMin: size / 2, fromBootdMax: size, dropped: 1}},
		{"lying and honest peers: the liar dropped, the honest one used", nil, func(t *testing.T, o *Options) {
			o.Peers = []string{servePeer(t, "", v2.idx, -1, true), servePeer(t, v2.file, v2.idx, -1, false)}
		}, want{fromBootdMax: size / 2, fromPeersMin: size / 3, dropped: 1}},
		{"unreachable peer: set aside, bootd alone", nil, func(t *testing.T, o *Options) {
			o.Peers = []string{closedPort(t)}
		}, want{fromBootdMin: size, fromBootdMax: size, setAside: 1}},
		{"index not the one bootd verified: the whole file", func(o *Options) { o.IndexSHA256 = hexsum([]byte("other")) }, nil,
			want{whole: true, fromBootdMin: size, fromBootdMax: size}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Options{Index: srv.URL + "/2/" + castr.IndexFile, IndexSHA256: v2.indexSHA, Store: srv.URL + "/chunks/",
				Output: filepath.Join(t.TempDir(), "root.img"), SHA256: v2.sha, Whole: srv.URL + "/2/rootfs.squashfs",
				N: 4, Log: logrus.StandardLogger()}
			if c.opts != nil {
				c.opts(&o)
			}
			if c.setup != nil {
				c.setup(t, &o)
			}
			chunks0, whole0 := srv.chunkBytes.Load(), srv.wholeBytes.Load()
			st, err := Fetch(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(o.Output)
			if !bytes.Equal(got, v2data) {
				t.Fatal("the image written is not version 2")
			}
			sent := srv.chunkBytes.Load() - chunks0 + srv.wholeBytes.Load() - whole0
			t.Logf("stats %+v; bootd sent %d bytes", st, sent)
			if st.Whole != c.want.whole {
				t.Errorf("whole-file fallback %v (%s), want %v", st.Whole, st.Why, c.want.whole)
			}
			if st.FromBootd != sent {
				t.Errorf("stats say %d bytes from bootd, bootd sent %d", st.FromBootd, sent)
			}
			if sent < c.want.fromBootdMin || sent > c.want.fromBootdMax {
				t.Errorf("bootd sent %d bytes, want %d to %d", sent, c.want.fromBootdMin, c.want.fromBootdMax)
			}
			if st.FromPeers < c.want.fromPeersMin {
				t.Errorf("%d bytes from peers, want at least %d", st.FromPeers, c.want.fromPeersMin)
			}
			if len(st.PeersDropped) != c.want.dropped {
				t.Errorf("peers dropped %q, want %d", st.PeersDropped, c.want.dropped)
			}
			if st.PeersSetAside != c.want.setAside {
				t.Errorf("peers set aside %d times, want %d", st.PeersSetAside, c.want.setAside)
			}
		})
	}

	t.Run("bootd's store damaged and no whole file: an error, nothing left", func(t *testing.T) {
		o := Options{Index: srv.URL + "/2/" + castr.IndexFile, IndexSHA256: v2.indexSHA, Store: srv.URL + "/nothing/",
			Output: filepath.Join(t.TempDir(), "root.img"), SHA256: v2.sha, Log: logrus.StandardLogger()}
		if _, err := Fetch(context.Background(), o); err == nil {
			t.Fatal("fetch without chunks nor whole file succeeded")
		}
		if fi, err := os.Stat(o.Output); err == nil && fi.Size() != 0 {
			t.Errorf("a failed fetch left %d bytes in %s", fi.Size(), o.Output)
		}
	})
}
