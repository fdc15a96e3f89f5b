package inventory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/labcluster/gpucluster/internal/atomicfile"
	"golang.org/x/sys/unix"
)

// formatVersion lets a later bootd migrate an older file instead of misreading it. Format 2 has
// the journal (see Store): a bootd that reads only format 1 would ignore the journal and lose
// what it holds, so it must refuse the file instead. Format 1 files are read as they are.
const formatVersion = 2

// seenPersistInterval bounds how often a mere "last seen" change is written: polls are frequent
// and a lost last-seen second is harmless, while assignments and leases are always written.
const seenPersistInterval = 30 * time.Second

type snapshot struct {
	Format  int       `json:"format"`
	Seq     uint64    `json:"seq,omitempty"` // numbers the writes: a journal record counts only if it is newer than the file
	Nodes   []Node    `json:"nodes"`
	Waiting []Machine `json:"waiting"`
	Leases  []Lease   `json:"leases"`
	// Released are names unassigned whose host keys bootd has not yet forgotten (revoked and
	// removed): a crash between the two leaves the name here, and the next start forgets them.
	// Only these, and names given to another machine, lose their keys at start: a name merely
	// absent (an inventory lost and started anew) keeps them.
	Released []string `json:"released,omitempty"`
}

// Store is the inventory, loaded in memory and written through on every change.
//
// Two ways of writing, one writer at a time:
//
//   - Group commit (discovery leases: OfferLease, BindLease, HoldAddress, HoldFreeAddress, ReleaseLease;
//     See). The change is applied in memory under mu and gets the next generation number; the
//     caller then waits, without mu, until a write covering its generation has completed
//     (commit). Whoever finds no write in flight becomes the writer: it encodes the whole state
//     (every generation up to now) under mu, and writes it (see Writes) without mu, while
//     further changes pile up for the next write. So a storm of N
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
//     DISCOVER is a fresh allocation, probed again. SetState to the state a node has already
//     (every boot script and hello) moves its last-seen time as See does, in this way.
//   - Write-through with rollback (Assign, Unassign, SetState, SetHardware: rare): under mu,
//     once no group write is in flight (lockIdle), the change is applied, the whole state is
//     written (so it makes pending group changes durable too), and on failure the change alone is
//     rolled back.
//
// Writes. Each write is the whole state, as one line appended to a journal beside the file
// (path + ".journal") and synced with fdatasync: one sync where replacing the file takes two
// (the file's and its directory's), which is most of a DHCP ACK's wait in a boot storm
// (docs/benchmarks-log.md, item 11). Once the journal has grown to maxJournal, the next write replaces the file
// itself (temp file + fsync + rename + directory fsync) and empties the journal. Writes are
// numbered (Seq); Open takes the file, or the journal's last complete line when it is numbered
// above the file (every line holds the whole state, so the last one is all that counts); the
// next write, or Compact (bootd calls it at start and at stop), folds that journal into the
// file. A crash mid-append leaves a torn last line, which Open skips; nothing is ever appended
// after it.
type Store struct {
	mu        sync.Mutex
	path      string
	data      snapshot
	now       func() time.Time
	persisted time.Time // when the state was last written

	seq         uint64 // the number of the last write; kept apart from data.Seq, which a rolled-back change restores
	journalSize int64  // bytes in the journal
	compact     bool   // the next write replaces the file: Open found a journal, or the last append failed

	gen      uint64               // generation of the in-memory state: bumped by each group-committed change
	durable  uint64               // the newest generation known to be on disk
	flushing *flush               // the group write in flight, if any
	leaseGen map[string]uint64    // MAC -> generation of its newest lease allocation, while not yet durable
	offered  map[string]time.Time // MAC -> when its OFFERed lease lapses unless REQUESTed (Pool.OfferHold)
	failed   error                // the last write's error; nil once a write succeeds
	offers   sync.WaitGroup       // OFFERs' background writes: Compact, at stop, waits for them
	found    bool                 // Open found a file or a journal: not a first start
}

// maxJournal is the journal size after which the next write replaces the file instead: a few
// hundred writes of a full lab's state, parsed in well under a second by Open.
const maxJournal = 4 << 20

// flush is one group write: it covers every generation up to upTo.
type flush struct {
	upTo uint64
	done chan struct{} // closed when the write ended; err is set then
	err  error
}

// Open loads the inventory at path, or starts an empty one if neither the file nor its journal
// exists yet (Found then reports false).
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	s := &Store{path: path, now: time.Now, data: snapshot{Format: formatVersion}, leaseGen: map[string]uint64{}, offered: map[string]time.Time{}}
	fileFound, err := s.load()
	if err != nil {
		return nil, err
	}
	found, err := s.replayJournal()
	if err != nil {
		return nil, err
	}
	s.found = fileFound || found
	s.seq, s.compact = s.data.Seq, found // a journal found is folded into the file by Compact or the next write
	return s, nil
}

// WriteFile replaces the inventory file with the state held now, journal folded in: bootd calls
// it at a first start, so that a later start without a file can tell a lost inventory from a
// first one.
func (s *Store) WriteFile() error {
	s.offers.Wait()
	s.lockIdle()
	defer s.mu.Unlock()
	s.compact = true
	return s.save()
}

// Found reports whether Open found an inventory (a file or a journal), rather than starting an
// empty one.
func (s *Store) Found() bool { return s.found }

// load reads the inventory file, if there is one yet, and reports whether there was. A file
// bootd did not write (no format: an empty object, null, a file truncated to "{}") is refused,
// not read as an inventory without nodes.
func (s *Store) load() (bool, error) {
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("read inventory: %w", err)
	}
	s.data = snapshot{}
	if err := json.Unmarshal(b, &s.data); err != nil {
		return true, fmt.Errorf("inventory %s is not valid JSON (%w); the previous good state is never overwritten in place, so this file was edited or damaged by hand", s.path, err)
	}
	if s.data.Format == 0 {
		return true, fmt.Errorf("inventory %s has no format: it is not an inventory bootd wrote (%.40q), and would start bootd with no nodes; restore it from a backup, or remove it to start with none (bootd serve --empty-inventory when the state directory holds secrets)", s.path, bytes.TrimSpace(b))
	}
	if s.data.Format != formatVersion && s.data.Format != 1 {
		return true, fmt.Errorf("inventory %s has format %d, this bootd reads formats 1 and %d", s.path, s.data.Format, formatVersion)
	}
	if err := s.data.check(); err != nil {
		return true, fmt.Errorf("inventory %s: %w; bootd changed nothing: correct the entry and start bootd again", s.path, err)
	}
	s.data.Format = formatVersion
	return true, nil
}

// journalOf is the journal beside the inventory file at path.
func journalOf(path string) string { return path + ".journal" }

// replayJournal takes the journal's last complete line if it is numbered above the state loaded
// so far, and reports whether there was a journal with anything in it. A last line without its
// newline, or that does not parse, is an append a crash cut short: the line before it counts.
func (s *Store) replayJournal() (found bool, err error) {
	b, err := os.ReadFile(journalOf(s.path))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read inventory journal: %w", err)
	}
	for rest := b; len(bytes.TrimSpace(rest)) > 0; {
		end := bytes.LastIndexByte(bytes.TrimRight(rest, "\n"), '\n') + 1 // start of the last line
		line := rest[end:]
		rest = rest[:end]
		var rec snapshot
		if !bytes.HasSuffix(line, []byte("\n")) || json.Unmarshal(line, &rec) != nil {
			continue // torn
		}
		if rec.Format != formatVersion {
			return true, fmt.Errorf("inventory journal %s: its last line has format %d, this bootd reads format %d", journalOf(s.path), rec.Format, formatVersion)
		}
		if rec.Seq > s.data.Seq {
			if err := rec.check(); err != nil {
				return true, fmt.Errorf("inventory journal %s: its last line: %w; bootd changed nothing", journalOf(s.path), err)
			}
			s.data = rec
		}
		return true, nil
	}
	return len(b) > 0, nil
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

// save writes the whole state (see Writes). Callers hold s.mu, taken with lockIdle (no group
// write in flight: writes never overlap, so an older state can never land after a newer one).
func (s *Store) save() error {
	w, err := s.encode()
	if err == nil {
		err = writeState(w)
	}
	if err = s.wrote(w, err); err != nil {
		return err
	}
	s.persisted, s.durable = s.now(), s.gen
	return nil
}

// stateWrite is one write of the whole state: a line for the journal, or the file's new content.
type stateWrite struct {
	path    string
	data    []byte
	replace bool // replace the file at path (and empty its journal); else append to the journal at path
}

// encode numbers the next write and serialises the state for it. Callers hold s.mu.
func (s *Store) encode() (stateWrite, error) {
	s.seq++
	s.data.Seq = s.seq
	if s.compact || s.journalSize >= maxJournal {
		b, err := json.MarshalIndent(s.data, "", "  ")
		if err != nil {
			return stateWrite{}, fmt.Errorf("encode inventory: %w", err)
		}
		return stateWrite{path: s.path, data: append(b, '\n'), replace: true}, nil
	}
	b, err := json.Marshal(s.data) // one line: JSON strings escape their newlines
	if err != nil {
		return stateWrite{}, fmt.Errorf("encode inventory: %w", err)
	}
	return stateWrite{path: journalOf(s.path), data: append(b, '\n')}, nil
}

// wrote records how write w ended and returns its outcome for the callers. Callers hold s.mu.
// After a failed write the next one replaces the file (an append that failed may have left
// part of its line). A replaced file whose journal could not be emptied is written: its number
// beats every journal line, but the next write must replace the file again.
func (s *Store) wrote(w stateWrite, err error) error {
	switch {
	case errors.Is(err, errJournalKept):
		s.compact, s.failed = true, nil
		return nil
	case err != nil:
		s.compact, s.failed = true, err
		return err
	case w.replace:
		s.journalSize, s.compact = 0, false
	default:
		s.journalSize += int64(len(w.data))
	}
	s.failed = nil
	return nil
}

// errJournalKept: the file was replaced, and its journal could not be emptied.
var errJournalKept = errors.New("inventory written, its journal not emptied")

// writeState performs one write (a variable for tests: counting, slowing, failing writes).
var writeState = performWrite

func performWrite(w stateWrite) error {
	if !w.replace {
		if err := appendSynced(w.path, w.data); err != nil {
			return fmt.Errorf("save inventory: %w", err)
		}
		return nil
	}
	if err := atomicfile.Write(w.path, w.data, 0o600); err != nil {
		return fmt.Errorf("save inventory: %w", err)
	}
	if err := emptyJournal(journalOf(w.path)); err != nil {
		return fmt.Errorf("%w: %w", errJournalKept, err)
	}
	return nil
}

// emptyJournal truncates the journal and syncs that: a journal line that survived would only be
// older than the file, but a crash must not leave new bytes beside the old length.
func emptyJournal(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	err = f.Truncate(0)
	if err == nil {
		err = datasync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// datasync is fdatasync (a variable for tests: a disk whose sync fails).
var datasync = func(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// appendSynced appends data to the file at path (created 0600, its directory synced then) and
// waits until it is on disk (fdatasync: the data and the size that reaches it, not the mtime).
// When that fails, what was appended is cut off again: the caller undoes its change in memory,
// and a line that reached the disk anyway must not bring it back at the next Open.
func appendSynced(path string, data []byte) error {
	_, err := os.Lstat(path)
	created := errors.Is(err, fs.ErrNotExist)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = datasync(f)
	}
	if err != nil && f.Truncate(end) == nil {
		_ = datasync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && created {
		err = atomicfile.SyncDir(filepath.Dir(path))
	}
	return err
}

// Compact folds the journal into the inventory file: at stop, so that the file alone holds the
// state, to read, back up or edit by hand; at start, so that the first DHCP request after a
// crash (likely one of a whole lab booting at once) does not pay for it. It waits for a write in
// flight, and for OFFERs' background writes: call it while no OFFER is being made (before DHCP
// starts, after it stops), so none runs after it.
func (s *Store) Compact() error {
	s.offers.Wait()
	s.lockIdle()
	defer s.mu.Unlock()
	if s.journalSize == 0 && !s.compact {
		return nil
	}
	s.compact = true
	return s.save()
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
		w, err := s.encode()
		s.flushing = f
		s.mu.Unlock()
		if err == nil {
			err = writeState(w)
		}
		s.mu.Lock()
		err = s.wrote(w, err)
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
