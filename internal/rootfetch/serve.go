package rootfetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/folbricht/desync"
)

// imageStore is a desync store over an image file and its index: a chunk is served only when the
// bytes at its place in the file hash to its id, so a node never passes on a chunk it has not
// written yet, or one damaged since (RAM, disk): the other node is told it is missing.
type imageStore struct {
	f   *os.File
	pos map[desync.ChunkID]desync.IndexChunk
}

func newImageStore(file string, idx desync.Index) (*imageStore, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	pos := make(map[desync.ChunkID]desync.IndexChunk, len(idx.Chunks))
	for _, c := range idx.Chunks {
		pos[c.ID] = c
	}
	return &imageStore{f: f, pos: pos}, nil
}

func (s *imageStore) GetChunk(id desync.ChunkID) (*desync.Chunk, error) {
	c, ok := s.pos[id]
	if !ok {
		return nil, desync.ChunkMissing{ID: id}
	}
	b := make([]byte, c.Size)
	if _, err := s.f.ReadAt(b, int64(c.Start)); err != nil {
		return nil, desync.ChunkMissing{ID: id}
	}
	chunk, err := desync.NewChunkWithID(id, b, false)
	if err != nil {
		return nil, desync.ChunkMissing{ID: id}
	}
	return chunk, nil
}

func (s *imageStore) HasChunk(id desync.ChunkID) (bool, error) {
	_, err := s.GetChunk(id)
	return err == nil, nil
}

func (s *imageStore) Close() error   { return s.f.Close() }
func (s *imageStore) String() string { return s.f.Name() }

// StorePath is where a node serves its chunks, in desync's HTTP chunk store layout, as bootd does.
const StorePath = "/chunks/"

// Serve serves the chunks of the image file (as its index lists them) and its have-map on ln,
// read-only, until ctx is done. It may run while the file is still being written: a chunk not
// written yet, or whose bytes do not check, is missing.
func Serve(ctx context.Context, ln net.Listener, file, indexFile, haveFile string) error {
	f, err := os.Open(indexFile)
	if err != nil {
		return err
	}
	idx, err := desync.IndexFromReader(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("index %s: %w", indexFile, err)
	}
	return ServeIndex(ctx, ln, file, haveFile, idx)
}

// ServeIndex is Serve with the index already read. haveFile is the have-map the fetch keeps
// ("": file + ".have").
func ServeIndex(ctx context.Context, ln net.Listener, file, haveFile string, idx desync.Index) error {
	if haveFile == "" {
		haveFile = file + HaveSuffix
	}
	store, err := newImageStore(file, idx)
	if err != nil {
		return err
	}
	defer store.Close()
	mux := http.NewServeMux()
	mux.Handle("GET "+StorePath, http.StripPrefix(StorePath[:len(StorePath)-1], desync.NewHTTPHandler(store, false, false, nil, "")))
	mux.HandleFunc("GET /have", serveHave(haveFile, haveSize(len(idx.Chunks))))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
