package rootfetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/folbricht/desync"
	"github.com/sirupsen/logrus"
)

// maxChunk bounds what one chunk request reads: the chunk store's largest chunk (castr's 256
// KiB) with room to spare. A peer that sends more is lying, and is never read past this.
const maxChunk = 1 << 20

// source is one HTTP chunk store in desync's layout (uncompressed: <base>/<4 hex>/<64 hex>):
// bootd's, or a peer's.
type source struct {
	base   string // ends in /
	peer   bool
	client *http.Client
	bytes  atomic.Int64 // chunk bytes it gave that checked out
	chunks atomic.Int64
}

func newSource(base string, peer bool, client *http.Client) *source {
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	return &source{base: base, peer: peer, client: client}
}

// errMissing is a 404: the store does not hold the chunk, which is no fault.
var errMissing = errors.New("chunk missing")

// get fetches a chunk and checks its bytes against its id (desync's check: sha256 of the
// plain bytes). A wrong chunk is a ChunkInvalid error.
func (s *source) get(ctx context.Context, id desync.ChunkID) (*desync.Chunk, error) {
	sid := id.String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+sid[:4]+"/"+sid, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, errMissing
	default:
		return nil, fmt.Errorf("%s: status %s", req.URL, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxChunk+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", req.URL, err)
	}
	if len(b) > maxChunk {
		return nil, fmt.Errorf("%s: more than %d bytes", req.URL, maxChunk)
	}
	c, err := desync.NewChunkWithID(id, b, false)
	if err != nil {
		return nil, err
	}
	s.bytes.Add(int64(len(b)))
	s.chunks.Add(1)
	return c, nil
}

// sources is the desync store the assembly reads: the peers in turn, then bootd. A peer that
// sends a wrong chunk, or cannot be reached, is dropped for the rest of the fetch; a chunk no
// peer holds comes from bootd, the trust root's own store.
type sources struct {
	ctx   context.Context
	bootd *source
	log   logrus.FieldLogger

	mu      sync.Mutex
	peers   []*source
	dropped []string
	next    int
}

// GetChunk tries the peers, starting at a different one each call so that the load spreads,
// then bootd.
func (s *sources) GetChunk(id desync.ChunkID) (*desync.Chunk, error) {
	for range s.peerCount() {
		p := s.pick()
		if p == nil {
			break
		}
		c, err := p.get(s.ctx, id)
		switch {
		case err == nil:
			return c, nil
		case errors.Is(err, errMissing):
			continue
		case s.ctx.Err() != nil:
			return nil, s.ctx.Err()
		default:
			s.drop(p, err)
		}
	}
	c, err := s.bootd.get(s.ctx, id)
	if errors.Is(err, errMissing) {
		return nil, desync.ChunkMissing{ID: id}
	}
	return c, err
}

func (s *sources) peerCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.peers)
}

func (s *sources) pick() *source {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.peers) == 0 {
		return nil
	}
	s.next = (s.next + 1) % len(s.peers)
	return s.peers[s.next]
}

// drop removes a peer for good: it sent bytes that are not the chunk it was asked for, or it
// failed. Either way the node will not ask it again during this fetch.
func (s *sources) drop(p *source, why error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range s.peers {
		if q == p {
			s.peers = append(s.peers[:i], s.peers[i+1:]...)
			s.dropped = append(s.dropped, p.base)
			s.log.WithFields(logrus.Fields{"peer": p.base, "problem": why.Error()}).Warn("peer dropped; its chunks come from others or bootd")
			return
		}
	}
}

func (s *sources) HasChunk(id desync.ChunkID) (bool, error) { return true, nil }
func (s *sources) Close() error                             { return nil }
func (s *sources) String() string                           { return s.bootd.base }

// httpClient is what the sources use: keep-alive, and bounded waits. Peers get short ones: a
// segment that drops their traffic must cost a booting node seconds, not minutes, before it
// turns to bootd.
func httpClient(n int, peer bool) *http.Client {
	dial, header, total := 10*time.Second, 30*time.Second, 120*time.Second
	if peer {
		dial, header, total = 2*time.Second, 5*time.Second, 20*time.Second
	}
	return &http.Client{
		Timeout: total,
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   n,
			ResponseHeaderTimeout: header,
			IdleConnTimeout:       60 * time.Second,
			DisableCompression:    true,
		},
	}
}
