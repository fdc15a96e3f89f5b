package castr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"

	"github.com/folbricht/desync"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/atomicfile"
)

// Chunk sizes: casync's and desync's defaults (16/64/256 KiB). Fixed here, because they are part
// of what makes an index reproducible and what lets two versions share chunks: a build with
// other sizes would share nothing with the versions before it.
const (
	MinSize = 16 << 10
	AvgSize = 64 << 10
	MaxSize = 256 << 10
)

// IndexFile is the index's name in a version directory, beside the root image it describes.
const IndexFile = "rootfs.caibx"

// Options are how the store keeps chunks: uncompressed (desync's "uncompressed" store: no
// .cacnk extension). The root image is a squashfs whose blocks are already zstd-compressed; a
// second compression gained a few percent and cost every node CPU for each chunk it fetched.
var Options = desync.StoreOptions{Uncompressed: true}

// StorePath is the chunk store of imagesDir: beside the image names, under a name no image can
// have (names never start with '.'), shared by every image and version.
func StorePath(imagesDir string) string { return filepath.Join(imagesDir, artifact.ChunkStoreDir) }

// Stats is what Chunk did.
type Stats struct {
	Chunks    int   // chunks in the index
	NewChunks int   // of which were not in the store yet
	NewBytes  int64 // their bytes
	Size      int64 // the file's size
}

// Chunk splits file into content-defined chunks, adds the chunks the store lacks (each written
// to a temporary file, synced and renamed into place) and writes the index to indexPath. The
// caller holds the store's shared lock (Lock) until the version that lists the index is
// published, so that Prune cannot remove the chunks in between.
func Chunk(ctx context.Context, file, imagesDir, indexPath string) (Stats, error) {
	var st Stats
	store, err := openStore(imagesDir)
	if err != nil {
		return st, err
	}
	f, err := os.Open(file)
	if err != nil {
		return st, err
	}
	defer f.Close()
	c, err := desync.NewChunker(f, MinSize, AvgSize, MaxSize)
	if err != nil {
		return st, err
	}
	idx, err := desync.ChunkStream(ctx, c, store, max(2, runtime.NumCPU()))
	if err != nil {
		return st, fmt.Errorf("chunk %s: %w", file, err)
	}
	if err := store.syncDirs(); err != nil {
		return st, err
	}
	st.Chunks, st.Size, st.NewChunks, st.NewBytes = len(idx.Chunks), idx.Length(), store.added, store.addedBytes
	return st, writeIndex(idx, indexPath)
}

func writeIndex(idx desync.Index, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = idx.WriteTo(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write index %s: %w", path, err)
	}
	return nil
}

// ReadIndex reads a casync index (.caibx) file.
func ReadIndex(path string) (desync.Index, error) {
	f, err := os.Open(path)
	if err != nil {
		return desync.Index{}, err
	}
	defer f.Close()
	idx, err := desync.IndexFromReader(f)
	if err != nil {
		return idx, fmt.Errorf("read index %s: %w", path, err)
	}
	return idx, nil
}

// Lock takes the store's lock: shared for a build that adds chunks and publishes a version,
// exclusive (and without waiting: ok is false when a build holds it) for Prune.
func Lock(imagesDir string, exclusive bool) (unlock func(), ok bool, err error) {
	dir := StorePath(imagesDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false, err
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX | syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, true, nil
}

// Pruned is what Prune removed and kept.
type Pruned struct {
	Indexes      int // published indexes read
	Kept, Chunks int // chunks referenced, and chunks the store held before
	Removed      int
}

// Prune removes every chunk that no published version's index references, with what killed
// writers left. It runs after each build (imgbuild build) under the exclusive lock; when a build
// holds the store it prunes nothing and says so (ok false): the next build prunes.
func Prune(ctx context.Context, imagesDir string) (p Pruned, ok bool, err error) {
	unlock, ok, err := Lock(imagesDir, true)
	if err != nil || !ok {
		return p, ok, err
	}
	defer unlock()
	keep, n, err := referenced(imagesDir)
	if err != nil {
		return p, true, err
	}
	p.Indexes, p.Kept = n, len(keep)
	store, err := desync.NewLocalStore(StorePath(imagesDir), Options)
	if err != nil {
		return p, true, err
	}
	before, err := countChunks(store.Base)
	if err != nil {
		return p, true, err
	}
	if err := store.Prune(ctx, keep); err != nil {
		return p, true, fmt.Errorf("prune %s: %w", store.Base, err)
	}
	after, err := countChunks(store.Base)
	p.Chunks, p.Removed = before, before-after
	return p, true, err
}

// referenced reads the index of every version that has one, as its manifest lists it. A version
// whose manifest or index cannot be read keeps nothing alive: bootd would not serve it either.
// Versions being written hold the shared lock, so none is half-written while this runs.
func referenced(imagesDir string) (map[desync.ChunkID]struct{}, int, error) {
	keep := map[desync.ChunkID]struct{}{}
	names, err := artifact.ReadNames(imagesDir)
	if errors.Is(err, fs.ErrNotExist) {
		return keep, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	n := 0
	for _, name := range names {
		versions, err := artifact.ReadNames(filepath.Join(imagesDir, name))
		if err != nil {
			return nil, 0, err
		}
		for _, v := range versions {
			img, err := artifact.Open(filepath.Join(imagesDir, name, v))
			if err != nil || img.Manifest.Rootfs == nil || img.Manifest.Rootfs.Index == "" {
				continue
			}
			idx, err := ReadIndex(filepath.Join(img.Dir, img.Manifest.Rootfs.Index))
			if err != nil {
				continue
			}
			n++
			for _, c := range idx.Chunks {
				keep[c.ID] = struct{}{}
			}
		}
	}
	return keep, n, nil
}

func countChunks(base string) (int, error) {
	n := 0
	err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && artifact.ValidChunkName(filepath.Base(filepath.Dir(path)), d.Name()) {
			n++
		}
		return nil
	})
	return n, err
}

// syncedStore is desync's local store whose new chunks survive a crash: each is synced before
// its rename, and the directories that gained entries are synced once chunking ends. A chunk
// already present is not written again (its name is its content's hash).
type syncedStore struct {
	desync.LocalStore
	mu         sync.Mutex
	dirs       map[string]bool
	added      int
	addedBytes int64
}

func openStore(imagesDir string) (*syncedStore, error) {
	dir := StorePath(imagesDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ls, err := desync.NewLocalStore(dir, Options)
	if err != nil {
		return nil, err
	}
	return &syncedStore{LocalStore: ls, dirs: map[string]bool{}}, nil
}

// StoreChunk writes a chunk the store lacks.
func (s *syncedStore) StoreChunk(c *desync.Chunk) error {
	id := c.ID().String()
	dir := filepath.Join(s.Base, id[:4])
	path := filepath.Join(dir, id)
	if _, err := os.Lstat(path); err == nil {
		return nil
	}
	b, err := c.Data()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeSynced(path, b); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirs[dir] = true
	s.added++
	s.addedBytes += int64(len(b))
	return nil
}

// tmpPrefix is desync's name for chunks being written, which its Prune removes as leftovers.
const tmpPrefix = ".tmp-cacnk"

// writeSynced writes b to a temporary file beside path (desync's name for one), syncs it and
// renames it to path; the directory is synced later, once for all its new chunks.
func writeSynced(path string, b []byte) error {
	if err := atomicfile.Rename(path, tmpPrefix+"*", b, 0o644); err != nil {
		return fmt.Errorf("store chunk %s: %w", filepath.Base(path), err)
	}
	return nil
}

func (s *syncedStore) syncDirs() error {
	for dir := range s.dirs {
		if err := atomicfile.SyncDir(dir); err != nil {
			return err
		}
	}
	return atomicfile.SyncDir(s.Base)
}
