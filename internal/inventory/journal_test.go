package inventory

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/atomicfile"
)

// rec is one journal line: a state numbered seq with one lease for mac.
func rec(seq int, mac string) string {
	return fmt.Sprintf(`{"format":2,"seq":%d,"nodes":[],"waiting":[],"leases":[{"mac":%q,"address":"10.80.0.10","expires":"2099-01-01T00:00:00Z"}]}`+"\n", seq, mac)
}

func TestOpenReplaysJournal(t *testing.T) {
	const file = `{"format":2,"seq":5,"nodes":[],"waiting":[],"leases":[{"mac":"file","address":"10.80.0.10","expires":"2099-01-01T00:00:00Z"}]}`
	const format1 = `{"format":1,"nodes":[],"waiting":[],"leases":[{"mac":"file","address":"10.80.0.10","expires":"2099-01-01T00:00:00Z"}]}`
	for _, tc := range []struct {
		name    string
		file    string // default: file
		journal string
		want    string // the lease's MAC after Open, or the error it must name
		wantErr bool
	}{
		{name: "no journal", journal: "", want: "file", wantErr: false},
		{name: "a format 1 file (no numbers) and a journal", file: format1, journal: rec(1, "a"), want: "a"},
		{name: "newest line wins", journal: rec(6, "a") + rec(7, "b"), want: "b", wantErr: false},
		{name: "lines older than the file are skipped", journal: rec(3, "old") + rec(4, "older"), want: "file", wantErr: false},
		{name: "a line numbered as the file is skipped", journal: rec(5, "same"), want: "file", wantErr: false},
		{name: "a torn last line is ignored", journal: rec(6, "a") + rec(7, "b")[:40], want: "a", wantErr: false},
		{name: "a last line that does not parse is ignored", journal: rec(6, "a") + "{\"format\":1,\"seq\":7,\n", want: "a", wantErr: false},
		{name: "a damaged line followed by blank space is a torn tail", journal: rec(6, "a") + "garb\n\n  \n", want: "a", wantErr: false},
		{name: "damage before the last line does not matter: each line holds the whole state", journal: rec(6, "a") + "garbage\n" + rec(8, "b"), want: "b", wantErr: false},
		{name: "another format is an error", journal: strings.Replace(rec(6, "a"), `"format":2`, `"format":9`, 1), want: "last line has format 9", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "inventory.json")
			content := cmp.Or(tc.file, file)
			if err := atomicfile.Write(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.journal != "" {
				if err := os.WriteFile(journalOf(path), []byte(tc.journal), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s, err := Open(path)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), journalOf(path)) {
					t.Fatalf("Open = %v, want an error naming the journal and %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ls := s.Leases(); len(ls) != 1 || ls[0].MAC != tc.want {
				t.Fatalf("leases = %+v, want the one of %s", ls, tc.want)
			}
		})
	}
}

// After a torn line, nothing is appended: the next write replaces the file and empties the
// journal, and what it wrote is what the next Open sees.
func TestTornJournalIsFoldedIntoTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.json")
	if err := os.WriteFile(journalOf(path), []byte(rec(6, "a")+rec(7, "b")[:40]), 0o600); err != nil {
		t.Fatal(err)
	}
	s := open(t, path)
	if _, err := dora(s, "52:54:00:00:00:01", testPool); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(journalOf(path)); err != nil || fi.Size() != 0 {
		t.Fatalf("journal after the next write: %v, %v; want it emptied", fi, err)
	}
	s2 := open(t, path)
	if ls := s2.Leases(); len(ls) != 2 {
		t.Fatalf("leases after reopen = %+v, want a's and the new one", ls)
	}
	// The following writes append again.
	if _, err := dora(s2, "52:54:00:00:00:02", testPool); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(journalOf(path)); err != nil || fi.Size() == 0 {
		t.Fatalf("journal after a further write: %v, %v; want a line appended", fi, err)
	}
}

// Which writes append and which replace the file: a full journal, and a failed append (here
// one that left half its line), make the next write a replacement.
func TestJournalAppendsUntilFullOrFailed(t *testing.T) {
	s, _ := newStore(t)
	var kinds []string
	tear := false
	swapWriteState(t, s, func(w stateWrite) error {
		kind := map[bool]string{true: "replace", false: "append"}[w.replace]
		if tear {
			tear = false
			kinds = append(kinds, kind+" (torn)")
			f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, _ = f.Write(w.data[:len(w.data)/2])
			return errors.New("disk full")
		}
		kinds = append(kinds, kind)
		return performWrite(w)
	})
	lease := func(i int, wantErr bool) {
		t.Helper()
		mac := fmt.Sprintf("52:54:00:00:00:%02x", i)
		// The OFFER's write is the one write of the lease: the REQUEST starts after it ended, or
		// after its failure was undone, and so writes nothing of its own.
		if _, _, _, err := s.OfferLease(mac, testPool, nil); err != nil {
			t.Fatal(err)
		}
		s.offers.Wait()
		if _, err := s.BindLease(mac, testPool); (err != nil) != wantErr {
			t.Fatalf("lease %d: err = %v, want an error: %v", i, err, wantErr)
		}
	}
	lease(1, false)
	lease(2, false)
	if fi, err := os.Stat(journalOf(s.path)); err != nil || fi.Size() != s.journalSize {
		t.Fatalf("journal %v, %v; the store counts %d bytes", fi, err, s.journalSize)
	}
	s.mu.Lock()
	s.journalSize = maxJournal
	s.mu.Unlock()
	lease(3, false) // the journal is full: the file is replaced
	lease(4, false)
	tear = true
	lease(5, true) // a torn line, and an error
	lease(6, false)
	lease(7, false)
	want := []string{"append", "append", "replace", "append", "append (torn)", "replace", "append"}
	if strings.Join(kinds, ", ") != strings.Join(want, ", ") {
		t.Fatalf("writes: %v\nwant:   %v", kinds, want)
	}
	d := open(t, s.path)
	if ls := d.Leases(); len(ls) != 6 {
		t.Fatalf("leases on disk = %d, want 6 (the failed allocation undone)", len(ls))
	}
}

// A write-through change whose line was written but whose sync failed is rolled back, and the
// line is cut off again: it does not come back at the next Open.
func TestFailedWriteThroughStaysUndone(t *testing.T) {
	s, _ := newStore(t)
	see(t, s, macA, macB)
	if _, err := s.Assign(req("c1", macA)); err != nil {
		t.Fatal(err)
	}
	heal := failingDisk(t, s)
	if _, err := s.Assign(req("c2", macB)); err == nil {
		t.Fatal("Assign succeeded with a failing disk")
	}
	d := open(t, s.path)
	if nodes, _ := d.Snapshot(); len(nodes) != 1 || nodes[0].Name != "c1" {
		t.Fatalf("nodes on disk = %+v, want c1 only (c2's assign failed)", nodes)
	}
	// The disk recovers: the next write is numbered above everything written before the
	// rollback (which restored the state's own number), so Open takes it.
	heal()
	if _, err := s.Assign(req("c2", macB)); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := open(t, s.path).Snapshot(); len(nodes) != 2 {
		t.Fatalf("nodes on disk after the disk recovered = %+v, want c1 and c2", nodes)
	}
}

// Compact leaves the file alone holding the state, and is a no-op on an empty journal.
func TestCompactFoldsTheJournal(t *testing.T) {
	s, _ := newStore(t)
	for i := range 3 {
		if _, err := dora(s, fmt.Sprintf("52:54:00:00:00:%02x", i), testPool); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(journalOf(s.path)); err != nil || fi.Size() != 0 {
		t.Fatalf("journal after Compact: %v, %v; want it empty", fi, err)
	}
	before, err := os.ReadFile(s.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(s.path); string(after) != string(before) {
		t.Error("a second Compact rewrote the file")
	}
	d := open(t, s.path)
	if ls := d.Leases(); len(ls) != 3 {
		t.Fatalf("leases in the file = %d, want 3", len(ls))
	}
}

// A file replaced whose journal cannot be emptied (its truncation does not sync) still counts as
// written: the file's number beats every journal line. Until the journal is emptied, writes keep
// replacing the file rather than appending behind lines it may still hold.
func TestJournalThatCannotBeEmptied(t *testing.T) {
	s, _ := newStore(t)
	if _, err := dora(s, macA, testPool); err != nil { // one line in the journal
		t.Fatal(err)
	}
	heal := failingDisk(t, s)
	if err := s.Compact(); err != nil {
		t.Fatalf("Compact with a journal that cannot be emptied = %v, want the file written", err)
	}
	if _, err := dora(s, macB, testPool); err != nil {
		t.Fatalf("a write after it = %v, want a replacement of the file (an append cannot sync)", err)
	}
	d := open(t, s.path)
	if ls := d.Leases(); len(ls) != 2 {
		t.Fatalf("leases on disk = %+v, want both", ls)
	}
	// The disk recovers: the next write replaces the file once more and empties the journal; the
	// one after appends again.
	heal()
	for i, mac := range []string{macC, "52:54:00:00:00:0d"} {
		if _, err := dora(s, mac, testPool); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(journalOf(s.path))
		if err != nil || (fi.Size() == 0) != (i == 0) {
			t.Fatalf("journal after write %d of the recovered disk: %v, %v; want empty after the first, a line after the second", i+1, fi, err)
		}
	}
}

// Every write-through puts the state back when its write fails: in memory and on disk the node
// is as it was.
func TestWriteThroughsRollBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(s *Store) error
	}{
		{"Assign", func(s *Store) error { _, err := s.Assign(req("c2", macB)); return err }},
		{"Unassign", func(s *Store) error { _, err := s.Unassign("c1"); return err }},
		{"SetState", func(s *Store) error { _, err := s.SetState("c1", StateUp); return err }},
		{"SetHardware", func(s *Store) error { _, err := s.SetHardware("c1", Hardware{CPUs: 8}); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore(t)
			see(t, s, macA, macB)
			if _, err := s.Assign(req("c1", macA)); err != nil {
				t.Fatal(err)
			}
			before, _ := s.Snapshot()
			heal := failingDisk(t, s)
			err := tc.change(s)
			heal()
			if err == nil {
				t.Fatal("the change succeeded with a failing disk")
			}
			after, _ := s.Snapshot()
			d := open(t, s.path)
			onDisk, _ := d.Snapshot()
			if !reflect.DeepEqual(after, before) || len(onDisk) != 1 || onDisk[0].Name != "c1" || onDisk[0].State != before[0].State || onDisk[0].Hardware != nil {
				t.Errorf("nodes after the failed %s: in memory %+v, on disk %+v; want both %+v", tc.name, after, onDisk, before)
			}
		})
	}
}
