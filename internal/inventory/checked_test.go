package inventory

import (
	"errors"
	"testing"
)

// A check validates only a ready node, and a failed one takes validated back to ready; other
// states stay (a node that has not reported its hardware since it booted cannot be validated).
// The change is saved: a reopened store has it.
func TestSetChecked(t *testing.T) {
	for _, tt := range []struct {
		name    string
		from    State
		passed  bool
		want    State
		changed bool
	}{
		{"ready passes", StateReady, true, StateValidated, true},
		{"validated passes again", StateValidated, true, StateValidated, false},
		{"validated fails", StateValidated, false, StateReady, true},
		{"ready fails", StateReady, false, StateReady, false},
		{"up passes", StateUp, true, StateUp, false},
		{"booting fails", StateBooting, false, StateBooting, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, c := newStore(t)
			see(t, s, macA)
			if _, err := s.Assign(req("c4", macA)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.SetState("c4", tt.from); err != nil {
				t.Fatal(err)
			}
			n, changed, err := s.SetChecked("c4", tt.passed)
			if err != nil || n.State != tt.want || changed != tt.changed {
				t.Fatalf("SetChecked(%v) from %s = %s, changed %v, %v; want %s, changed %v", tt.passed, tt.from, n.State, changed, err, tt.want, tt.changed)
			}
			nodes, _ := reopen(t, s, c).Snapshot()
			if nodes[0].State != tt.want {
				t.Fatalf("after reopen: %s, want %s", nodes[0].State, tt.want)
			}
		})
	}
	t.Run("unknown node", func(t *testing.T) {
		s, _ := newStore(t)
		if _, _, err := s.SetChecked("c9", true); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	})
}
