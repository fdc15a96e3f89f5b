package config

import (
	"net"
	"net/netip"
	"testing"
)

func TestNetmask(t *testing.T) {
	tests := []struct {
		subnet string
		want   string
	}{
		{"10.80.0.0/24", "255.255.255.0"},
		{"10.80.0.0/22", "255.255.252.0"},
		{"10.0.0.0/8", "255.0.0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.subnet, func(t *testing.T) {
			c := Default()
			c.Network.Subnet = netip.MustParsePrefix(tt.subnet)
			if got := net.IP(c.Netmask()).String(); got != tt.want {
				t.Errorf("Netmask() = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestInPool(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"10.80.0.199", false},
		{"10.80.0.200", true},
		{"10.80.0.230", true},
		{"10.80.0.249", true},
		{"10.80.0.250", false},
		{"10.81.0.220", false},
		{"::ffff:10.80.0.220", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := Default().InPool(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Errorf("InPool(%s) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
}
