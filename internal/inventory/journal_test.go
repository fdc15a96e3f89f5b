package inventory

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/atomicfile"
)

// rec is one journal line: a state numbered seq with one lease for mac.
func rec(seq int, mac string) string {
	return fmt.Sprintf(`{"format":1,"seq":%d,"nodes":[],"waiting":[],"leases":[{"mac":%q,"address":"10.80.0.10","expires":"2099-01-01T00:00:00Z"}]}`+"\n", seq, mac)
}

func TestOpenReplaysJournal(t *testing.T) {
	const file = `{"format":1,"seq":5,"nodes":[],"waiting":[],"leases":[{"mac":"file","address":"10.80.0.10","expires":"2026-11-21T12:00:00Z"}]}`
	for _, tc := range []struct {
		name    string
		journal string
		want    string // the lease's MAC after Open, or the error it must name
		wantErr bool
	}{
		{"no journal", "", "file", false},
		{"newest line wins", rec(6, "a") + rec(7, "b"), "b", false},
		{"lines older than the file are skipped", rec(3, "old") + rec(4, "older"), "file", false},
		{"a torn last line is ignored", rec(6, "a") + rec(7, "b")[:40], "a", false},
		{"a last line that does not parse is ignored", rec(6, "a") + "{\"format\":1,\"seq\":7,\n", "a", false},
		{"damage followed by more is an error", rec(6, "a") + "garbage\n" + rec(8, "b"), "line 2 is damaged", true},
		{"another format is an error", strings.Replace(rec(6, "a"), `"format":1`, `"format":9`, 1), "line 1 has format 9", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "inventory.json")
			if err := atomicfile.Write(path, []byte(file), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.journal != "" {
				if err := os.WriteFile(path+".journal", []byte(tc.journal), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s, err := Open(path)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path+".journal") {
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
	if err := os.WriteFile(path+".journal", []byte(rec(6, "a")+rec(7, "b")[:40]), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DiscoveryLease("52:54:00:00:00:01", testPool); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + ".journal"); err != nil || fi.Size() != 0 {
		t.Fatalf("journal after the next write: %v, %v; want it emptied", fi, err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if ls := s2.Leases(); len(ls) != 2 {
		t.Fatalf("leases after reopen = %+v, want a's and the new one", ls)
	}
	// The following writes append again.
	if _, err := s2.DiscoveryLease("52:54:00:00:00:02", testPool); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + ".journal"); err != nil || fi.Size() == 0 {
		t.Fatalf("journal after a further write: %v, %v; want a line appended", fi, err)
	}
}

// Which writes append and which replace the file: a full journal and a failed append make the
// next write a replacement.
func TestJournalAppendsUntilFullOrFailed(t *testing.T) {
	s, _ := newStore(t)
	var kinds []string
	fail := false
	swapWriteState(t, func(w stateWrite) error {
		kind := map[bool]string{true: "replace", false: "append"}[w.replace]
		if fail {
			fail = false
			kinds = append(kinds, kind+" (failed)")
			return errors.New("disk full")
		}
		kinds = append(kinds, kind)
		return performWrite(w)
	})
	lease := func(i int) {
		t.Helper()
		_, _ = s.DiscoveryLease(fmt.Sprintf("52:54:00:00:00:%02x", i), testPool)
	}
	lease(1)
	lease(2)
	s.mu.Lock()
	s.journalSize = maxJournal
	s.mu.Unlock()
	lease(3) // the journal is full: the file is replaced
	lease(4)
	fail = true
	lease(5) // fails: it may have left a torn line
	lease(6)
	lease(7)
	want := []string{"append", "append", "replace", "append", "append (failed)", "replace", "append"}
	if strings.Join(kinds, ", ") != strings.Join(want, ", ") {
		t.Fatalf("writes: %v\nwant:   %v", kinds, want)
	}
	d, err := Open(s.path)
	if err != nil {
		t.Fatal(err)
	}
	if ls := d.Leases(); len(ls) != 6 {
		t.Fatalf("leases on disk = %d, want 6 (the failed allocation undone)", len(ls))
	}
}
