package rootfetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/folbricht/desync"
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
	if resp.ContentLength > maxChunk {
		return nil, lie{fmt.Errorf("%s: %d bytes, more than a chunk can be", req.URL, resp.ContentLength)}
	}
	var b []byte
	if resp.ContentLength >= 0 {
		// One allocation of the announced size, not ReadAll's doubling: chunks come by the
		// ten thousand.
		b = make([]byte, resp.ContentLength)
		_, err = io.ReadFull(resp.Body, b)
	} else {
		b, err = io.ReadAll(io.LimitReader(resp.Body, maxChunk+1))
		if err == nil && len(b) > maxChunk {
			err = lie{fmt.Errorf("more than %d bytes", maxChunk)}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", req.URL, err)
	}
	c, err := desync.NewChunkWithID(id, b, false)
	if err != nil {
		return nil, err
	}
	s.bytes.Add(int64(len(b)))
	s.chunks.Add(1)
	return c, nil
}

// httpClient is what the sources use: keep-alive, and bounded waits. Peers get short ones: a
// segment that drops their traffic must cost a booting node seconds, not minutes, before it
// turns to bootd.
func httpClient(n int, peer bool) *http.Client {
	dial, header, total := 10*time.Second, 30*time.Second, 120*time.Second
	if peer {
		// A SYN lost on a full link is sent again after 1 s, then 3 s: allow one retry.
		dial, header, total = 5*time.Second, 10*time.Second, 30*time.Second
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
