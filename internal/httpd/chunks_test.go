package httpd

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/testkit/golden"
)

// chunkedTarget is fakeMachines' node with a version published by chunks.
func chunkedTarget() Target {
	t := (&fakeMachines{}).target()
	t.RootfsIndex, t.RootfsIndexSHA256 = "rootfs.caibx", strings.Repeat("cd", 32)
	return t
}

// TestChunkedBootScript: a version with a chunk index boots with bootd's fetch program as one
// more initrd and the index with its hash on the command line; without the program, or without
// an index, the node gets neither (it fetches the whole file).
func TestChunkedBootScript(t *testing.T) {
	opts := Options{BaseURL: "http://10.80.0.1", Netmask: netip.MustParseAddr("255.255.255.0"), FetchInitrd: "bootd-fetch.img"}
	noFetch := opts
	noFetch.FetchInitrd = ""
	plain := (&fakeMachines{}).target()
	cases := []struct {
		name    string
		opts    Options
		target  Target
		chunked bool
	}{
		{"index and fetch program", opts, chunkedTarget(), true},
		{"no fetch program", noFetch, chunkedTarget(), false},
		{"no index", opts, plain, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := New(c.opts, nil, nil, nil, logrus.New())
			v, err := s.targetView(c.target)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			if err := targetScript.Execute(&b, v); err != nil {
				t.Fatal(err)
			}
			script := b.String()
			has := func(s string) bool { return strings.Contains(script, s) }
			if got := has("rd.bootd.index=http://10.80.0.1/images/compute/2026.11.21-1/rootfs.caibx rd.bootd.index.sha256=" + c.target.RootfsIndexSHA256); got != c.chunked {
				t.Errorf("index on the command line: %v, want %v", got, c.chunked)
			}
			if got := has("initrd http://10.80.0.1/node/bootd-fetch.img") && has("initrd=bootd-fetch.img"); got != c.chunked {
				t.Errorf("fetch initrd loaded: %v, want %v", got, c.chunked)
			}
			if !has(" rd.bootd.sha256=" + c.target.RootfsSHA256) {
				t.Error("the whole image's hash is gone from the command line")
			}
			if c.chunked {
				golden.Check(t, filepath.Join("testdata", "target-chunked.ipxe"), []byte(script))
			}
		})
	}
}

// TestChunks: bootd serves the chunk store in desync's layout, and nothing outside it.
func TestChunks(t *testing.T) {
	dir := t.TempDir()
	id := strings.Repeat("ab", 32)
	if err := os.MkdirAll(filepath.Join(dir, "chunks", id[:4]), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "chunks", id[:4], id), []byte("chunk bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	ts := httptest.NewServer(New(Options{BaseURL: "http://x"}, &fakeMachines{}, fakeFiles{t, dir}, nil, log).Handler())
	defer ts.Close()
	cases := []struct {
		path, method string
		status       int
	}{
		{"/chunks/" + id[:4] + "/" + id, http.MethodGet, http.StatusOK},
		{"/chunks/" + id[:4] + "/" + id, http.MethodHead, http.StatusOK},
		{"/chunks/" + id[:4] + "/" + strings.Repeat("ab", 31) + "cd", http.MethodGet, http.StatusNotFound},
		{"/chunks/" + id[:4] + "/..%2f..%2f" + id, http.MethodGet, http.StatusNotFound},
		{"/chunks/../" + id, http.MethodGet, http.StatusNotFound},
		{"/chunks/" + id[:4] + "/" + id, http.MethodPut, http.StatusMethodNotAllowed},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, ts.URL+c.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
			}
			if c.status == http.StatusOK && c.method == http.MethodGet && string(b) != "chunk bytes" {
				t.Errorf("body %q", b)
			}
		})
	}
}

// fakePeers accepts announcements from 127.0.0.1 only, as bootd accepts only nodes.
type fakePeers struct{ announced []string }

func (f *fakePeers) Announce(from netip.Addr, index string, port uint16) (string, error) {
	if from != netip.MustParseAddr("127.0.0.1") {
		return "", ErrNotFound
	}
	f.announced = append(f.announced, index)
	return "c4", nil
}

func (f *fakePeers) List(index string, from netip.Addr) []string {
	if len(f.announced) == 0 {
		return nil
	}
	return []string{"http://10.80.0.105:7480/chunks/"}
}

func TestPeerEndpoints(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	s := New(Options{BaseURL: "http://x"}, &fakeMachines{}, fakeFiles{t, t.TempDir()}, nil, log)
	p := &fakePeers{}
	s.SetPeers(p)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	index := strings.Repeat("ef", 32)
	cases := []struct {
		name, method, path string
		status             int
		peers              int
	}{
		{"no peers yet", http.MethodGet, "/api/v1/peers?index=" + index, http.StatusOK, 0},
		{"bad index", http.MethodGet, "/api/v1/peers?index=xyz", http.StatusBadRequest, -1},
		{"announce", http.MethodPost, "/api/v1/node/peer?index=" + index + "&port=7480", http.StatusNoContent, -1},
		{"announce without port", http.MethodPost, "/api/v1/node/peer?index=" + index, http.StatusBadRequest, -1},
		{"listed after", http.MethodGet, "/api/v1/peers?index=" + index, http.StatusOK, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, ts.URL+c.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
			}
			if c.peers >= 0 {
				var r PeersReply
				if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
					t.Fatal(err)
				}
				if len(r.Peers) != c.peers {
					t.Errorf("peers %v, want %d", r.Peers, c.peers)
				}
			}
		})
	}
}

// fakeRoots accepts reports from 127.0.0.1 only, as bootd accepts only nodes.
type fakeRoots struct{ got []RootReport }

func (f *fakeRoots) Root(from netip.Addr, r RootReport) (string, error) {
	if from != netip.MustParseAddr("127.0.0.1") {
		return "", ErrNotFound
	}
	f.got = append(f.got, r)
	return "c4", nil
}

func TestRootReport(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	s := New(Options{BaseURL: "http://x"}, &fakeMachines{}, fakeFiles{t, t.TempDir()}, nil, log)
	roots := &fakeRoots{}
	s.SetRoots(roots)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	cases := []struct {
		name, body string
		status     int
	}{
		{"by chunks", `{"source":"chunks","storage":"ram","size":100,"from_bootd":4,"from_peers":96}`, http.StatusNoContent},
		{"whole file", `{"source":"whole","storage":"ram","size":100,"from_bootd":100}`, http.StatusNoContent},
		{"unknown source", `{"source":"torrent","storage":"ram"}`, http.StatusBadRequest},
		{"unknown storage", `{"source":"chunks","storage":"tape"}`, http.StatusBadRequest},
		{"negative figures", `{"source":"chunks","storage":"ram","size":-1}`, http.StatusBadRequest},
		{"not JSON", `chunks`, http.StatusBadRequest},
		{"too large", `{"source":"chunks","storage":"ram","x":"` + strings.Repeat("a", 5000) + `"}`, http.StatusBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.Post(ts.URL+"/api/v1/node/root", "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
			}
		})
	}
	if len(roots.got) != 2 {
		t.Errorf("recorded %d reports, want the 2 good ones", len(roots.got))
	}
}
