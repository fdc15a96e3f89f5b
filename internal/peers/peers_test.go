package peers

import (
	"net/netip"
	"testing"
	"time"
)

func TestRegistry(t *testing.T) {
	now := time.Unix(1000, 0)
	r := New()
	r.now = func() time.Time { return now }
	a, b, c := netip.MustParseAddr("10.80.0.101"), netip.MustParseAddr("10.80.0.102"), netip.MustParseAddr("10.80.0.103")
	r.Announce("x", a, 7480)
	r.Announce("x", b, 7480)
	r.Announce("y", c, 7480)

	cases := []struct {
		name    string
		step    func()
		index   string
		exclude netip.Addr
		want    int
	}{
		{"others of the same index", nil, "x", a, 1},
		{"all of an index for a stranger", nil, "x", c, 2},
		{"another index", nil, "y", a, 1},
		{"unknown index", nil, "z", a, 0},
		{"a node moving to another index leaves the first", func() { r.Announce("y", b, 7480) }, "x", c, 1},
		{"expired after TTL without renewal", func() { now = now.Add(TTL / 2); r.Announce("y", c, 7480); now = now.Add(TTL/2 + time.Second) }, "y", a, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.step != nil {
				tc.step()
			}
			got := r.List(tc.index, tc.exclude)
			if len(got) != tc.want {
				t.Errorf("List(%s, not %s) = %v, want %d peers", tc.index, tc.exclude, got, tc.want)
			}
			for _, p := range got {
				if p.Addr() == tc.exclude {
					t.Errorf("List names the node asking, %s", p)
				}
			}
		})
	}
}
