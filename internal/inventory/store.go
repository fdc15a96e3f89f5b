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

	"github.com/labcluster/gpucluster/internal/atomicfile"
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
//
// Two ways of writing, one writer at a time:
//
//   - Group commit (discovery leases: DiscoveryLease*, HoldAddress, HoldFreeAddress, ReleaseLease;
//     See). The change is applied in memory under mu and gets the next generation number; the
//     caller then waits, without mu, until a write covering its generation has completed
//     (commit). Whoever finds no write in flight becomes the writer: it encodes the whole state
//     (every generation up to now) under mu, and writes it (temp file + fsync + rename + dir
//     fsync) without mu, while further changes pile up for the next write. So a storm of N
//     allocations costs a few fsyncs, not N, and each caller still returns only once its change
//     is durable. Every file written is the in-memory state at some instant, so a crash leaves
//     a prefix of the changes, in order. Other goroutines can see a change before it is durable
//     (e.g. the next allocation skips an address whose lease is still being written); nothing
//     hands a not-yet-durable change to a client: a renewal of a lease whose write is pending
//     waits for that write too (leaseGen).
//     A FAILED group write: its changes stay in memory (later changes may build on them, so
//     they cannot be undone one by one), every caller that waited on that write gets the error,
//     and the next write (any later change) tries again to write them all. The one exception is
//     a new discovery allocation: its caller removes that lease again (unless a later write
//     made it durable meanwhile), so the address is not offered, and the client's retransmitted
//     DISCOVER is a fresh allocation, probed again.
//   - Write-through with rollback (Assign, Unassign, SetState, SetHardware: rare): under mu,
//     once no group write is in flight (lockIdle), the change is applied, the whole state is
//     written (so it makes pending group changes durable too), and on failure the change alone is
//     rolled back.
type Store struct {
	mu        sync.Mutex
	path      string
	data      snapshot
	now       func() time.Time
	persisted time.Time // when the file was last written

	gen      uint64               // generation of the in-memory state: bumped by each group-committed change
	durable  uint64               // the newest generation known to be on disk
	flushing *flush               // the group write in flight, if any
	leaseGen map[string]uint64    // MAC -> generation of its newest lease allocation, while not yet durable
	offered  map[string]time.Time // MAC -> when its OFFERed lease lapses unless REQUESTed (Pool.OfferHold)
}

// flush is one group write: it covers every generation up to upTo.
type flush struct {
	upTo uint64
	done chan struct{} // closed when the write ended; err is set then
	err  error
}

// Open loads the inventory at path, or starts an empty one if the file does not exist yet.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	s := &Store{path: path, now: time.Now, data: snapshot{Format: formatVersion}, leaseGen: map[string]uint64{}, offered: map[string]time.Time{}}
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
// Callers hold s.mu, taken with lockIdle (no group write in flight: writes never overlap, so an
// older snapshot can never be renamed over a newer one).
func (s *Store) save() error {
	b, err := s.encode()
	if err == nil {
		err = s.write(b)
	}
	if err != nil {
		return err
	}
	s.persisted, s.durable = s.now(), s.gen
	return nil
}

func (s *Store) encode() ([]byte, error) {
	b, err := json.MarshalIndent(s.data, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode inventory: %w", err)
	}
	return append(b, '\n'), nil
}

// writeFile replaces the inventory file atomically (a variable for tests: counting writes,
// failing them).
var writeFile = atomicfile.Write

func (s *Store) write(b []byte) error {
	if err := writeFile(s.path, b, 0o600); err != nil {
		return fmt.Errorf("save inventory: %w", err)
	}
	return nil
}

// lockIdle takes s.mu once no group write is in flight; while it is held, none can start.
func (s *Store) lockIdle() {
	s.mu.Lock()
	for f := s.flushing; f != nil; f = s.flushing {
		s.mu.Unlock()
		<-f.done
		s.mu.Lock()
	}
}

// bump gives the change just applied in memory its generation. Callers hold s.mu.
func (s *Store) bump() uint64 {
	s.gen++
	return s.gen
}

// commit returns once generation g is durable (nil), or with the error of the write that
// covered g (see Store). g == 0 means nothing to wait for. Callers do not hold s.mu.
func (s *Store) commit(g uint64) error {
	if g == 0 {
		return nil
	}
	s.mu.Lock()
	for {
		if s.durable >= g {
			s.mu.Unlock()
			return nil
		}
		if f := s.flushing; f != nil {
			s.mu.Unlock()
			<-f.done
			if f.upTo >= g {
				return f.err // nil: g is durable
			}
			s.mu.Lock() // that write started before g: write again
			continue
		}
		// Become the writer of everything up to now.
		f := &flush{upTo: s.gen, done: make(chan struct{})}
		b, err := s.encode()
		s.flushing = f
		s.mu.Unlock()
		if err == nil {
			err = s.write(b)
		}
		s.mu.Lock()
		if err == nil && f.upTo > s.durable {
			s.durable, s.persisted = f.upTo, s.now()
		}
		f.err = err
		s.flushing = nil
		close(f.done)
		s.mu.Unlock()
		return err
	}
}
