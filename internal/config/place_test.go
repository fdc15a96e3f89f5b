package config

import (
	"errors"
	"net/netip"
	"testing"
)

func TestPlace(t *testing.T) {
	tests := []struct {
		name string
		want Placement
		err  string
	}{
		{"master", Placement{Name: "master", Role: "master", Address: netip.MustParseAddr("10.80.0.100"), Image: "master"}, ""},
		{"c1", Placement{Name: "c1", Role: "compute", Address: netip.MustParseAddr("10.80.0.101"), Image: "compute"}, ""},
		{"c42", Placement{Name: "c42", Role: "compute", Address: netip.MustParseAddr("10.80.0.142"), Image: "compute"}, ""},
		{"c99", Placement{Name: "c99", Role: "compute", Address: netip.MustParseAddr("10.80.0.199"), Image: "compute"}, ""},
		{"c100", Placement{}, `name "c100" fits no role: use "master" or c1..c99 (compute.max_nodes is 99)`},
		{"c99999999999999999999", Placement{}, `name "c99999999999999999999" fits no role: use "master" or c1..c99 (compute.max_nodes is 99)`},
		{"c01", Placement{}, `name "c01" fits no role: use "master" or c1..c99`},
		{"c0", Placement{}, `name "c0" fits no role: use "master" or c1..c99`},
		{"c", Placement{}, `name "c" fits no role: use "master" or c1..c99`},
		{"c-1", Placement{}, `name "c-1" fits no role: use "master" or c1..c99`},
		{"c1x", Placement{}, `name "c1x" fits no role: use "master" or c1..c99`},
		{"C1", Placement{}, `name "C1" fits no role: use "master" or c1..c99`},
		{"foo", Placement{}, `name "foo" fits no role: use "master" or c1..c99`},
		{"gpu7", Placement{}, `name "gpu7" fits no role: use "master" or c1..c99`},
		{"", Placement{}, `name "" fits no role: use "master" or c1..c99`},
	}
	c := Default()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.Place(tt.name)
			checkErr(t, err, tt.err)
			if err != nil && !errors.Is(err, ErrNoRole) {
				t.Errorf("error %v does not wrap ErrNoRole", err)
			}
			if got != tt.want {
				t.Errorf("Place(%q) = %+v, want %+v", tt.name, got, tt.want)
			}
		})
	}
}

func TestPlaceOtherLab(t *testing.T) {
	c := Default()
	c.Master = MasterRole{Name: "head", Address: netip.MustParseAddr("10.80.0.10"), Image: "master", Version: "7"}
	c.Compute = ComputeRole{Prefix: "node", FirstAddress: netip.MustParseAddr("10.80.0.20"), MaxNodes: 8, Image: "gpu", Version: "3"}
	tests := []struct {
		name string
		want Placement
		err  string
	}{
		{"head", Placement{Name: "head", Role: "master", Address: netip.MustParseAddr("10.80.0.10"), Image: "master", Version: "7"}, ""},
		{"node8", Placement{Name: "node8", Role: "compute", Address: netip.MustParseAddr("10.80.0.27"), Image: "gpu", Version: "3"}, ""},
		{"master", Placement{}, `name "master" fits no role: use "head" or node1..node8`},
		{"node9", Placement{}, `name "node9" fits no role: use "head" or node1..node8 (compute.max_nodes is 8)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.Place(tt.name)
			checkErr(t, err, tt.err)
			if got != tt.want {
				t.Errorf("Place(%q) = %+v, want %+v", tt.name, got, tt.want)
			}
		})
	}
}
