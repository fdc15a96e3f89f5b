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

func TestSender(t *testing.T) {
	zero := netip.MustParseAddr("0.0.0.0")
	for _, tc := range []struct {
		name string
		pkt  []byte
		want net.HardwareAddr // claiming target; nil: no claim
	}{
		{"a reply from the squatter", arp(2, other, target, zero), other},
		{"the squatter announcing itself (gratuitous request)", arp(1, other, target, target), other},
		{"our own probe looped back", Request(self, target), nil},
		{"another host probing the same address (sender 0.0.0.0)", Request(other, target), nil},
		{"truncated", arp(2, other, target, zero)[:20], nil},
		{"not ARP for IPv4", func() []byte { b := arp(2, other, target, zero); b[3] = 0x06; return b }(), nil},
		{"an unknown opcode", func() []byte { b := arp(2, other, target, zero); b[7] = 9; return b }(), nil},
		{"empty", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, mac := Sender(tc.pkt, self)
			if mac.String() != tc.want.String() || (mac != nil && a != target) {
				t.Fatalf("Sender = %v %v, want %v %v", a, mac, target, tc.want)
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

// dispatch hands a claim to every sweep waiting for that address, once, and every sender to the
// watcher; a sweep whose addresses are all claimed stops waiting.
func TestDispatch(t *testing.T) {
	a201 := netip.MustParseAddr("10.80.0.201")
	zero := netip.MustParseAddr("0.0.0.0")
	g := &segment{sock: &socket{}, mac: self, listening: map[netip.Addr][]*collector{}}
	var seen []string
	g.seen = func(a netip.Addr, mac net.HardwareAddr) { seen = append(seen, a.String()+" "+mac.String()) }
	both := g.listen([]netip.Addr{target, a201})
	one := g.listen([]netip.Addr{target})
	g.dispatch(arp(2, other, target, zero))
	g.dispatch(arp(2, self, a201, zero))                                   // our own: nobody hears it
	g.dispatch(arp(1, net.HardwareAddr{2, 0, 0, 0, 0, 9}, target, target)) // a second claimant: the first stays
	select {
	case <-one.all:
	default:
		t.Fatal("a sweep whose one address is claimed is still waiting")
	}
	select {
	case <-both.all:
		t.Fatal("a sweep with an unclaimed address stopped waiting")
	default:
	}
	if r := g.result(both); len(r) != 1 || r[target].String() != other.String() {
		t.Fatalf("result = %v, want %s claimed by %s", r, target, other)
	}
	g.forget(one)
	g.forget(both)
	if len(g.listening) != 0 {
		t.Fatalf("listeners left after forget: %v", g.listening)
	}
	want := []string{"10.80.0.200 " + other.String(), "10.80.0.200 02:00:00:00:00:09"}
	if len(seen) != 2 || seen[0] != want[0] || seen[1] != want[1] {
		t.Fatalf("watcher saw %v, want %v", seen, want)
	}
}
