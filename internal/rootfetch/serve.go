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
// node's have-map lists it, that is once the node checked it against its id on receipt (or
// checked the whole image, from its cache): a node never passes on a chunk it has not written and
// checked. It is not hashed again on the way out (a third sha256 of every byte in a storm, where
// the nodes' CPU is the limit on this machine), and the receiver checks every chunk anyway.
type imageStore struct {
	f, have *os.File
	pos     map[desync.ChunkID]desync.IndexChunk
	first   map[desync.ChunkID]int
}

func newImageStore(file, haveFile string, idx desync.Index) (*imageStore, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	have, err := os.Open(haveFile)
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &imageStore{f: f, have: have, pos: make(map[desync.ChunkID]desync.IndexChunk, len(idx.Chunks)),
		first: make(map[desync.ChunkID]int, len(idx.Chunks))}
	for i, c := range idx.Chunks {
		if _, ok := s.first[c.ID]; !ok {
			s.first[c.ID], s.pos[c.ID] = i, c
		}
	}
	return s, nil
}

// held reads the chunk's bit in the have-map file, which the fetching process sets.
func (s *imageStore) held(id desync.ChunkID) bool {
	i, ok := s.first[id]
	if !ok {
		return false
	}
	var b [1]byte
	if _, err := s.have.ReadAt(b[:], int64(i/8)); err != nil {
		return false
	}
	return b[0]&(1<<(i%8)) != 0
}

func (s *imageStore) GetChunk(id desync.ChunkID) (*desync.Chunk, error) {
	if !s.held(id) {
		return nil, desync.ChunkMissing{ID: id}
	}
	c := s.pos[id]
	b := make([]byte, c.Size)
	if _, err := s.f.ReadAt(b, int64(c.Start)); err != nil {
		return nil, desync.ChunkMissing{ID: id}
	}
	return desync.NewChunkWithID(id, b, true)
}

func (s *imageStore) HasChunk(id desync.ChunkID) (bool, error) { return s.held(id), nil }

func (s *imageStore) Close() error {
	s.have.Close()
	return s.f.Close()
}
func (s *imageStore) String() string { return s.f.Name() }

// StorePath is where a node serves its chunks, in desync's HTTP chunk store layout, as bootd does.
const StorePath = "/chunks/"

// Serve serves the chunks of the image file (as its index lists them) that its have-map lists,
// and the have-map, on ln, read-only, until ctx is done. It runs while the file is being written.
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
	store, err := newImageStore(file, haveFile, idx)
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
