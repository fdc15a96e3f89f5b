package inventory

import (
	"errors"
	"testing"
	"time"
)

var testTime = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// A node's endorsement key: the first presented after its assignment is recorded and persists;
// another is refused; a pin (assign --ek) sets it on a new binding or replaces it on a bound node;
// a new assignment starts without one.
func TestRecordTPM(t *testing.T) {
	keyA, keyB := NewTPM([]byte("ek-a"), false, testTime), NewTPM([]byte("ek-b"), false, testTime)
	pinB := NewTPM([]byte("ek-b"), true, testTime)
	type step struct {
		do      string // "record A", "record B", "pin B", "reassign"
		want    string // the recorded key's data after the step, "" for none
		wantErr string // "mismatch", "notfound"
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first key is recorded, same key again passes", []step{{do: "record A", want: "ek-a"}, {do: "record A", want: "ek-a"}}},
		{"another key is refused and changes nothing", []step{{do: "record A", want: "ek-a"}, {do: "record B", want: "ek-a", wantErr: "mismatch"}}},
		{"a pin replaces the recorded key", []step{{do: "record A", want: "ek-a"}, {do: "pin B", want: "ek-b"}, {do: "record A", want: "ek-b", wantErr: "mismatch"}, {do: "record B", want: "ek-b"}}},
		{"a new assignment starts without a key", []step{{do: "record A", want: "ek-a"}, {do: "reassign", want: ""}, {do: "record B", want: "ek-b"}}},
		{"a request that identified the old assignment records nothing", []step{{do: "reassign", want: ""}, {do: "record stale", want: "", wantErr: "notfound"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := newStore(t)
			see(t, s, macA)
			n := mustAssign(t, s, req("c1", macA))
			stale := n.AssignedAt
			for i, st := range tc.steps {
				var err error
				switch st.do {
				case "record A":
					_, err = s.RecordTPM("c1", n.AssignedAt, keyA)
				case "record B":
					_, err = s.RecordTPM("c1", n.AssignedAt, keyB)
				case "record stale":
					_, err = s.RecordTPM("c1", stale, keyA)
				case "pin B":
					r := req("c1", "")
					r.TPM = &pinB
					_, err = s.Assign(r)
				case "reassign":
					if _, err = s.Unassign("c1"); err == nil {
						c.t = c.t.Add(1)
						see(t, s, macA)
						n = mustAssign(t, s, req("c1", macA))
					}
				}
				var mm *TPMMismatch
				switch {
				case st.wantErr == "mismatch" && !errors.As(err, &mm):
					t.Fatalf("step %d (%s): err %v, want a TPM mismatch", i, st.do, err)
				case st.wantErr == "notfound" && !errors.Is(err, ErrNotFound):
					t.Fatalf("step %d (%s): err %v, want not found", i, st.do, err)
				case st.wantErr == "" && err != nil:
					t.Fatalf("step %d (%s): %v", i, st.do, err)
				}
				got, err := s.NodeByMAC(macA)
				if err != nil {
					t.Fatal(err)
				}
				if have := recorded(got); have != st.want {
					t.Fatalf("step %d (%s): recorded key %q, want %q", i, st.do, have, st.want)
				}
			}
			// What was recorded survives a restart.
			want, _ := s.NodeByMAC(macA)
			again := open(t, s.path)
			got, err := again.NodeByMAC(macA)
			if err != nil || recorded(got) != recorded(want) || (got.TPM != nil && got.TPM.EKSHA256 != want.TPM.EKSHA256) {
				t.Fatalf("after reopening: %+v, want %+v (%v)", got.TPM, want.TPM, err)
			}
		})
	}
}

func recorded(n Node) string {
	if n.TPM == nil {
		return ""
	}
	return string(n.TPM.EK)
}

// An assign with --ek records the key pinned on the new binding.
func TestAssignPinsTPM(t *testing.T) {
	s, _ := newStore(t)
	see(t, s, macA)
	pin := NewTPM([]byte("ek-pinned"), true, testTime)
	r := req("c1", macA)
	r.TPM = &pin
	n := mustAssign(t, s, r)
	if n.TPM == nil || !n.TPM.Pinned || string(n.TPM.EK) != "ek-pinned" {
		t.Fatalf("assigned with --ek: TPM %+v", n.TPM)
	}
	if _, err := s.RecordTPM("c1", n.AssignedAt, NewTPM([]byte("ek-other"), false, testTime)); err == nil {
		t.Fatal("a key other than the pinned one was accepted")
	}
}

func mustAssign(t *testing.T, s *Store, r AssignRequest) Node {
	t.Helper()
	a, err := s.Assign(r)
	if err != nil {
		t.Fatal(err)
	}
	return a.Node
}
