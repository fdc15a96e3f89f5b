package inventory

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// formatVersion lets a later bootd migrate an older file instead of misreading it.
const formatVersion = 1

// seenPersistInterval bounds how often a mere "last seen" change is written: polls are frequent
// and a lost last-seen second is harmless, while assignments and leases are always written.
const seenPersistInterval = 30 * time.Second

type snapshot struct {
	Format  int       `json:"format"`
	Nodes   []Node    `json:"nodes"`
	Waiting []Machine `json:"waiting"`
	Leases  []Lease   `json:"leases"`
}

// Store is the inventory, loaded in memory and written through on every change.
type Store struct {
	mu        sync.Mutex
	path      string
	data      snapshot
	now       func() time.Time
	persisted time.Time // when the file was last written
}

// Open loads the inventory at path, or starts an empty one if the file does not exist yet.
func Open(path string) (*Store, error) {
	s := &Store{path: path, now: time.Now, data: snapshot{Format: formatVersion}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read inventory: %w", err)
	}
	if err := json.Unmarshal(b, &s.data); err != nil {
		return nil, fmt.Errorf("inventory %s is not valid JSON (%w); the previous good state is never overwritten in place, so this file was edited or damaged by hand", path, err)
	}
	if s.data.Format != formatVersion {
		return nil, fmt.Errorf("inventory %s has format %d, this bootd reads format %d", path, s.data.Format, formatVersion)
	}
	return s, nil
}

// Path is the file the store writes.
func (s *Store) Path() string { return s.path }

// Snapshot returns copies of the nodes (sorted by name) and of the machines waiting now (in the
// order they appeared).
func (s *Store) Snapshot() ([]Node, []Machine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	waiting := slices.DeleteFunc(slices.Clone(s.data.Waiting), func(m Machine) bool { return now.Sub(m.LastSeen) > WaitingTTL })
	return slices.Clone(s.data.Nodes), waiting
}

// save writes the whole state to a temporary file, syncs it, and renames it over the old one.
// Callers hold s.mu.
func (s *Store) save() error {
	b, err := json.MarshalIndent(s.data, "", "  ")
	if err != nil {
		return fmt.Errorf("encode inventory: %w", err)
	}
	if err := WriteFileAtomic(s.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("save inventory: %w", err)
	}
	s.persisted = s.now()
	return nil
}

// WriteFileAtomic replaces path with data so that a crash leaves either the old or the new
// content: temp file in the same directory, fsync, rename, fsync of the directory.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := writeSynced(f, data, perm); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

func writeSynced(f *os.File, data []byte, perm fs.FileMode) error {
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(perm)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
