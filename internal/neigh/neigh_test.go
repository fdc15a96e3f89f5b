package neigh

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

const table = `IP address       HW type     Flags       HW address            Mask     Device
10.80.0.104      0x1         0x2         52:54:00:E2:E0:04     *        br0
10.80.0.105      0x1         0x0         00:00:00:00:00:00     *        br0
`

func TestLookup(t *testing.T) {
	tests := []struct {
		addr, want string
		unknown    bool
	}{
		{"10.80.0.104", "52:54:00:e2:e0:04", false},
		{"10.80.0.105", "", true}, // incomplete: nobody answered
		{"10.80.0.106", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			got, err := lookup(strings.NewReader(table), netip.MustParseAddr(tt.addr))
			if tt.unknown != errors.Is(err, ErrUnknown) || got != tt.want {
				t.Fatalf("lookup = %q, %v; want %q (unknown %v)", got, err, tt.want, tt.unknown)
			}
		})
	}
}
