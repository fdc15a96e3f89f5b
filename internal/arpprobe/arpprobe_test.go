package arpprobe

import (
	"net"
	"net/netip"
	"testing"
)

var (
	self   = net.HardwareAddr{0x52, 0x54, 0x00, 0, 0, 1}
	other  = net.HardwareAddr{0x52, 0x54, 0x00, 0, 0, 0x66}
	target = netip.MustParseAddr("10.80.0.200")
)

func TestRequestIsAnRFC5227Probe(t *testing.T) {
	b := Request(self, target)
	want := []byte{
		0, 1, 8, 0, 6, 4, 0, 1, // Ethernet, IPv4, request
		0x52, 0x54, 0x00, 0, 0, 1, // sender MAC: ours
		0, 0, 0, 0, // sender IP 0.0.0.0: nobody learns a mapping from a probe
		0, 0, 0, 0, 0, 0, // target MAC unknown
		10, 80, 0, 200,
	}
	if string(b) != string(want) {
		t.Fatalf("probe\n% x\nwant\n% x", b, want)
	}
}

// reply builds an ARP packet with op, sender sha/spa, target tha/tpa.
func arp(op byte, sha net.HardwareAddr, spa netip.Addr, tpa netip.Addr) []byte {
	b := Request(sha, tpa)
	b[7] = op
	s := spa.As4()
	copy(b[14:18], s[:])
	return b
}

func TestClaimant(t *testing.T) {
	zero := netip.MustParseAddr("0.0.0.0")
	for _, tc := range []struct {
		name string
		pkt  []byte
		want net.HardwareAddr
	}{
		{"a reply from the squatter", arp(2, other, target, zero), other},
		{"the squatter announcing itself (gratuitous request)", arp(1, other, target, target), other},
		{"our own probe looped back", Request(self, target), nil},
		{"another host probing the same address (sender 0.0.0.0)", Request(other, target), nil},
		{"a reply about another address", arp(2, other, netip.MustParseAddr("10.80.0.201"), zero), nil},
		{"truncated", arp(2, other, target, zero)[:20], nil},
		{"not ARP for IPv4", func() []byte { b := arp(2, other, target, zero); b[3] = 0x06; return b }(), nil},
		{"an unknown opcode", func() []byte { b := arp(2, other, target, zero); b[7] = 9; return b }(), nil},
		{"empty", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Claimant(tc.pkt, target, self); got.String() != tc.want.String() {
				t.Fatalf("Claimant = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestProbeRefusesWhatItCannotProbe(t *testing.T) {
	if _, err := New("lo").Probe(t.Context(), netip.MustParseAddr("::1"), 0); err == nil {
		t.Error("probed an IPv6 address")
	}
	if _, err := New("no-such-if0").Probe(t.Context(), target, 0); err == nil {
		t.Error("probed on a missing interface")
	}
	if _, err := New("lo").Probe(t.Context(), target, 0); err == nil {
		t.Error("probed on an interface without an Ethernet address")
	}
}
