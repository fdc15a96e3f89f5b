package rootfetch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// A have-map is two bitmaps over the index's positions: the first has a bit set once the chunk
// there is written and checked, the second while the node is fetching it from bootd. A node
// keeps it beside the image (<image>.have) and serves it at /have, so that its peers ask it only
// for chunks it holds, and leave to it the chunks it is already taking from bootd: desync's HTTP
// store would answer a HEAD per chunk, a request per chunk per peer; one map a second costs a
// few KiB (BitTorrent's bitfield is the same idea).

// HaveSuffix names an image's have-map file.
const HaveSuffix = ".have"

// haveMap is the fetching node's map, mirrored into its file for the serving process.
type haveMap struct {
	mu   sync.Mutex
	bits []byte
	f    *os.File
}

func haveLen(chunks int) int { return (chunks + 7) / 8 }

// haveSize is the size of a have-map (both bitmaps) for an index of that many chunks.
func haveSize(chunks int) int { return 2 * haveLen(chunks) }

func newHaveMap(path string, chunks int) (*haveMap, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	h := &haveMap{bits: make([]byte, haveSize(chunks)), f: f}
	if _, err := f.WriteAt(h.bits, 0); err != nil {
		f.Close()
		return nil, err
	}
	return h, nil
}

// set marks the chunk at pos held (and no longer being fetched).
func (h *haveMap) set(pos int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bits[pos/8] |= 1 << (pos % 8)
	h.flipLocked(len(h.bits)/2+pos/8, pos, false)
	_, _ = h.f.WriteAt(h.bits[pos/8:pos/8+1], int64(pos/8))
}

// fetching marks the chunk at pos as being fetched from bootd, or not any more.
func (h *haveMap) fetching(pos int, on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flipLocked(len(h.bits)/2+pos/8, pos, on)
}

func (h *haveMap) flipLocked(at, pos int, on bool) {
	old := h.bits[at]
	if on {
		h.bits[at] |= 1 << (pos % 8)
	} else {
		h.bits[at] &^= 1 << (pos % 8)
	}
	if h.bits[at] != old {
		_, _ = h.f.WriteAt(h.bits[at:at+1], int64(at))
	}
}

// clear forgets everything: a fetch that failed serves nothing.
func (h *haveMap) clear() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.bits)
	_, _ = h.f.WriteAt(h.bits, 0)
}

func (h *haveMap) close() error { return h.f.Close() }

// haveURL is a peer's have-map, beside its chunk store (.../chunks/ -> .../have).
func haveURL(store string) string {
	return strings.TrimSuffix(strings.TrimSuffix(store, "/"), "chunks") + "have"
}

// pollHaves fetches every live peer's have-map now and then, and asks list (bootd) for new peers
// less often; a have-map of the wrong size is a lie (or another index): the peer is dropped.
func (a *assembler) pollHaves(ctx context.Context, list func(context.Context) []string, client *http.Client) {
	known := map[string]bool{}
	a.mu.Lock()
	for _, p := range a.all {
		known[p.base] = true
	}
	a.mu.Unlock()
	want := haveSize(len(a.idx.Chunks))
	var lastList time.Time
	for {
		if list != nil && time.Since(lastList) >= peerListEvery {
			lastList = time.Now()
			a.addPeers(list(ctx), known, client)
		}
		a.mu.Lock()
		live := append([]*peer{}, a.peers...)
		a.mu.Unlock()
		due := a.wake(time.Now())
		var wg sync.WaitGroup
		for i, p := range append(live, due...) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, err := getHave(ctx, client, haveURL(p.base), want)
				switch {
				case err != nil && ctx.Err() != nil:
				case err != nil && i >= len(live):
					// Still unreachable: back to sleep, for longer.
					a.mu.Lock()
					a.peers = append(a.peers, p)
					a.mu.Unlock()
					a.failed(p, fmt.Errorf("have-map: %w", err))
				case err != nil:
					a.failed(p, fmt.Errorf("have-map: %w", err))
				default:
					p.have.Store(&b)
					if i >= len(live) {
						a.revive(p)
					}
				}
			}()
		}
		wg.Wait()
		a.mu.Lock()
		a.cond.Broadcast()
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(haveEvery):
		}
	}
}

// How often a fetching node reads its peers' have-maps (each node's map is read by every other:
// at N = 50 and 1 s, 2450 requests a second on the segment), and asks bootd for new peers (in a
// storm every node starts at once, and learns of the others within a second).
var (
	haveEvery     = 2 * time.Second
	peerListEvery = time.Second
)

// maxPeers bounds the peers one node fetches from at once: bootd's list (peers.MaxList), so
// that every node of a storm up to that size places the same owners on every chunk.
const maxPeers = 64

func (a *assembler) addPeers(urls []string, known map[string]bool, client *http.Client) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, u := range urls {
		if known[u] || len(a.peers) >= maxPeers {
			continue
		}
		known[u] = true
		p := &peer{source: newSource(u, true, client), hash: nodeHash(u)}
		a.peers = append(a.peers, p)
		a.all = append(a.all, p)
	}
	a.ownLocked()
}

func getHave(ctx context.Context, client *http.Client, url string, want int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: status %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, int64(want)+1))
	if err != nil {
		return nil, err
	}
	if len(b) != want {
		return nil, lie{fmt.Errorf("%s: %d bytes, want %d for this index", url, len(b), want)}
	}
	return b, nil
}

// serveHave sends the have-map file; a missing one is a 404 (the node holds nothing).
func serveHave(path string, want int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(path)
		if err != nil || len(b) != want {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "have", time.Time{}, bytes.NewReader(b))
	}
}
