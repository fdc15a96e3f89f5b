package rootfetch

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/folbricht/desync"
	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/castr"
)

// TestStorm: nodes booting at once, each serving what it holds while it fetches and learning of
// the others from a peer list, one of them a liar. Every node ends with the image; the liar is
// dropped; bootd sends each chunk about once (on loopback the timing is
// nothing like a shaped link's: bench/rootstorm measures that; this is the path, not its speed).
func TestStorm(t *testing.T) {
	const nodes = 6
	images := t.TempDir()
	data := random(7, 8<<20)
	v := publish(t, images, "1", data)
	srv := serveBootd(t, images)
	// bootd's link: about 13 MB/s shared by every node, as one appliance link is; the peers
	// answer at loopback speed. Have-maps are read every 50 ms here (a second in a lab).
	srv.delay = 5 * time.Millisecond
	defer func(d time.Duration) { haveEvery = d }(haveEvery)
	haveEvery = 50 * time.Millisecond
	liar := servePeer(t, "", v.idx, -1, true)

	var mu sync.Mutex
	urls := []string{liar}
	list := func(context.Context) []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string{}, urls...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	stats := make([]Stats, nodes)
	errs := make([]error, nodes)
	outs := make([]string, nodes)
	for n := range nodes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		url := "http://" + ln.Addr().String() + StorePath
		outs[n] = filepath.Join(t.TempDir(), "root.img")
		o := Options{Index: srv.URL + "/1/" + castr.IndexFile, IndexSHA256: v.indexSHA, Store: srv.URL + "/chunks/",
			Output: outs[n], SHA256: v.sha, Log: logrus.StandardLogger(), PeerList: list, Self: url,
			OnIndex: func(idx desync.Index) {
				go ServeIndex(ctx, ln, outs[n], "", idx)
				mu.Lock()
				urls = append(urls, url)
				mu.Unlock()
			}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stats[n], errs[n] = Fetch(ctx, o)
		}()
	}
	wg.Wait()
	var fromBootd, fromPeers int64
	for n := range nodes {
		if errs[n] != nil {
			t.Fatalf("node %d: %v", n, errs[n])
		}
		got, _ := os.ReadFile(outs[n])
		if !bytes.Equal(got, data) {
			t.Fatalf("node %d holds another image", n)
		}
		st := stats[n]
		t.Logf("node %d: bootd %d, peers %d, dropped %v, whole %v", n, st.FromBootd, st.FromPeers, st.PeersDropped, st.Whole)
		if st.Whole {
			t.Errorf("node %d fell back to the whole file: %s", n, st.Why)
		}
		for _, d := range st.PeersDropped {
			if d != liar {
				t.Errorf("node %d dropped an honest peer %s", n, d)
			}
		}
		fromBootd += st.FromBootd
		fromPeers += st.FromPeers
	}
	sent := srv.chunkBytes.Load()
	t.Logf("bootd sent %d bytes for %d nodes of a %d-byte image (%.2f images); peers %d", sent, nodes, len(data), float64(sent)/float64(len(data)), fromPeers)
	if sent != fromBootd {
		t.Errorf("bootd sent %d, the nodes count %d", sent, fromBootd)
	}
	if fromPeers == 0 {
		t.Error("no node took a chunk from a peer")
	}
	// Each chunk leaves bootd about once (1.02-1.05 images in runs here); N images would mean the
	// peers shared nothing.
	if sent > 2*int64(len(data)) {
		t.Errorf("bootd sent %.2f images for %d nodes, want about one", float64(sent)/float64(len(data)), nodes)
	}
	liars := 0
	for _, st := range stats {
		liars += len(st.PeersDropped)
	}
	if liars == 0 {
		t.Error("no node dropped the lying peer")
	}
}
