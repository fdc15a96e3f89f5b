package testhook

import "testing"

func TestSetRestores(t *testing.T) {
	x := 1
	t.Run("inside", func(t *testing.T) {
		Set(t, &x, 2)
		if x != 2 {
			t.Fatalf("inside: %d, want 2", x)
		}
	})
	if x != 1 {
		t.Errorf("after: %d, want 1", x)
	}
}
