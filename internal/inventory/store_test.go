package inventory

import (
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/atomicfile"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newStore(t *testing.T) (*Store, *clock) {
	t.Helper()
	s := open(t, filepath.Join(t.TempDir(), "inventory.json"))
	c := &clock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
	s.now = c.now
	return s, c
}

// open opens the inventory at path afresh, as a restarted bootd loads it, for one test, which ends
// only once the store's background writes (OFFERs') are done: none then writes into a directory
// the test is removing.
func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.offers.Wait)
	return s
}

func see(t *testing.T, s *Store, macs ...string) {
	t.Helper()
	for _, m := range macs {
		if _, _, err := s.See(m, Facts{Serial: "S-" + m}); err != nil {
			t.Fatal(err)
		}
	}
}

func req(name, mac string) AssignRequest {
	n := map[string]int{"master": 100, "c1": 101, "c2": 102, "c4": 104}[name]
	return AssignRequest{Name: name, Role: "compute", Address: netip.AddrFrom4([4]byte{10, 80, 0, byte(n)}), MAC: mac}
}

const (
	macA = "52:54:00:00:00:0a"
	macB = "52:54:00:00:00:0b"
	macC = "52:54:00:00:00:0c"
)

func TestAssign(t *testing.T) {
	tests := []struct {
		name     string
		waiting  []string
		before   []AssignRequest
		req      AssignRequest
		wantMAC  string
		wantErr  string // substring; "" means success
		replaced string // MAC of the name's earlier binding that the assignment replaced
		ambig    bool
	}{
		{name: "the one waiting machine", waiting: []string{macA}, req: req("c4", ""), wantMAC: macA},
		{name: "by MAC in another spelling", waiting: []string{macA, macB}, req: req("c4", "52-54-00-00-00-0B"), wantMAC: macB},
		{name: "none waiting", req: req("c4", ""), wantErr: "no machine is waiting"},
		{name: "several waiting", waiting: []string{macA, macB}, req: req("c4", ""), ambig: true},
		{name: "unknown MAC", waiting: []string{macA}, req: req("c4", macC), wantErr: "has netbooted here"},
		{name: "bad MAC", waiting: []string{macA}, req: req("c4", "52:54:00"), wantErr: "not an Ethernet MAC"},
		{name: "name in use", waiting: []string{macA, macB}, before: []AssignRequest{req("c4", macA)}, req: req("c4", macB), wantErr: "add --replace"},
		{name: "replace moves the name", waiting: []string{macA, macB}, before: []AssignRequest{req("c4", macA)}, req: func() AssignRequest { r := req("c4", macB); r.Replace = true; return r }(), wantMAC: macB, replaced: macA},
		{name: "machine already another node", waiting: []string{macA}, before: []AssignRequest{req("c1", macA)}, req: req("c4", macA), wantErr: "already c1"},
		{name: "same assignment twice", waiting: []string{macA}, before: []AssignRequest{req("c4", macA)}, req: req("c4", macA), wantMAC: macA},
		{name: "address in use", waiting: []string{macA, macB}, before: []AssignRequest{req("c1", macA)}, req: AssignRequest{Name: "c9", Address: netip.MustParseAddr("10.80.0.101"), MAC: macB}, wantErr: "already used by node c1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			see(t, s, tt.waiting...)
			for _, b := range tt.before {
				if _, err := s.Assign(b); err != nil {
					t.Fatal(err)
				}
			}
			n, err := s.Assign(tt.req)
			var amb *Ambiguous
			switch {
			case tt.ambig:
				if !errors.As(err, &amb) || len(amb.Waiting) != len(tt.waiting) {
					t.Fatalf("err = %v, want Ambiguous listing %d machines", err, len(tt.waiting))
				}
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case n.MAC != tt.wantMAC || n.Name != tt.req.Name || n.State != StateAssigned:
				t.Fatalf("node = %+v, want %s on %s, assigned", n, tt.req.Name, tt.wantMAC)
			case (n.Replaced == nil) != (tt.replaced == "") || n.Replaced != nil && n.Replaced.MAC != tt.replaced:
				t.Fatalf("replaced = %+v, want the binding on %q", n.Replaced, tt.replaced)
			}
		})
	}
}

func TestStatePersistsAcrossReopen(t *testing.T) {
	s, c := newStore(t)
	see(t, s, macA, macB)
	if _, err := s.Assign(req("c4", macA)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetState("c4", StateUp); err != nil {
		t.Fatal(err)
	}
	pool := Pool{Start: netip.MustParseAddr("10.80.0.200"), End: netip.MustParseAddr("10.80.0.201"), LeaseTime: time.Minute}
	if _, err := dora(s, macB, pool); err != nil {
		t.Fatal(err)
	}
	r := reopen(t, s, c) // the same moment: what is compared is what was saved, not how old it is
	nodes, waiting := r.Snapshot()
	if len(nodes) != 1 || nodes[0].Name != "c4" || nodes[0].State != StateUp || nodes[0].Facts.Serial != "S-"+macA {
		t.Errorf("nodes after reopen = %+v", nodes)
	}
	if len(waiting) != 1 || waiting[0].MAC != macB {
		t.Errorf("waiting after reopen = %+v", waiting)
	}
	if l := r.Leases(); len(l) != 1 || l[0].MAC != macB {
		t.Errorf("leases after reopen = %+v", l)
	}
}

func TestUnassignReturnsMachineToWaiting(t *testing.T) {
	s, _ := newStore(t)
	see(t, s, macA)
	if _, err := s.Assign(req("c4", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Unassign("c4"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Unassign("c4"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second unassign: err = %v, want ErrNotFound", err)
	}
	if _, ok, _ := s.See(macA, Facts{}); ok {
		t.Fatal("machine still assigned after unassign")
	}
	if _, w := s.Snapshot(); len(w) != 1 {
		t.Fatalf("waiting = %+v, want the machine back", w)
	}
}

func TestOpenRejectsDamagedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.json")
	for _, tt := range []struct{ name, content, want string }{
		{"not json", "{nodes", "not valid JSON"},
		{"future format", `{"format": 9}`, "has format 9"},
		// Each used to start bootd with no nodes and no warning.
		{"empty object", `{}`, "has no format: it is not an inventory bootd wrote"},
		{"null", `null`, "has no format"},
		{"nodes without a format", `{"nodes": []}`, "has no format"},
		{"an array", `[]`, "not valid JSON"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := atomicfile.Write(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(path); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestReleasedUntilForgotten: an unassigned name stays listed as released, across a restart,
// until bootd records its host keys forgotten.
func TestReleasedUntilForgotten(t *testing.T) {
	s, _ := newStore(t)
	see(t, s, macA)
	if _, err := s.Assign(req("c4", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Unassign("c4"); err != nil {
		t.Fatal(err)
	}
	if got := open(t, s.Path()).Released(); !slices.Equal(got, []string{"c4"}) {
		t.Fatalf("released after a restart: %v, want c4", got)
	}
	if err := s.Forgotten("c4"); err != nil {
		t.Fatal(err)
	}
	if got := open(t, s.Path()).Released(); len(got) != 0 {
		t.Fatalf("released after Forgotten and a restart: %v, want none", got)
	}
}

// TestFound: Open tells a first start (neither file nor journal) from a start on an inventory,
// and WriteFile makes the file of a first start.
func TestFound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.json")
	s, err := Open(path)
	if err != nil || s.Found() {
		t.Fatalf("first open: found %v, %v; want not found", s != nil && s.Found(), err)
	}
	if err := s.WriteFile(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path); err != nil || !s.Found() {
		t.Fatalf("open after WriteFile: %v, want found", err)
	}
}

func TestWaitingExpires(t *testing.T) {
	s, c := newStore(t)
	see(t, s, macA)
	c.t = c.t.Add(WaitingTTL + time.Second)
	see(t, s, macB)
	if _, w := s.Snapshot(); len(w) != 1 || w[0].MAC != macB {
		t.Fatalf("waiting = %+v, want only the machine still polling", w)
	}
	if n, err := s.Assign(req("c4", "")); err != nil || n.MAC != macB {
		t.Fatalf("assign without --mac = %+v, %v; want the one machine still waiting", n, err)
	}
}
