package dhcpd

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// FuzzReply feeds arbitrary packets to Reply: it must not panic, and whatever it answers must be
// a well-formed reply to that packet whose address, if any, is the one the Leaser gave.
// The seed corpus is testdata/fuzz/FuzzReply, written from seedPackets by TestFuzzSeedCorpus.
func FuzzReply(f *testing.F) {
	h := NewHandler(testOptions(), fuzzLeaser{}, quietLog())
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := dhcpv4.FromBytes(data)
		if err != nil {
			return
		}
		resp := h.Reply(req)
		if resp == nil {
			return
		}
		checkFuzzReply(t, req, resp)
	})
}

func checkFuzzReply(t *testing.T, req, resp *dhcpv4.DHCPv4) {
	if resp.OpCode != dhcpv4.OpcodeBootReply || resp.TransactionID != req.TransactionID {
		t.Fatalf("not a reply to the request: %s", resp)
	}
	yiaddr := addr(resp.YourIPAddr)
	switch typ := resp.MessageType(); {
	case typ == dhcpv4.MessageTypeNak || req.MessageType() == dhcpv4.MessageTypeInform:
		if yiaddr.IsValid() {
			t.Fatalf("%s carries yiaddr %v", typ, yiaddr)
		}
	case typ == dhcpv4.MessageTypeOffer || typ == dhcpv4.MessageTypeAck:
		if yiaddr != poolIP && yiaddr != nodeIP {
			t.Fatalf("%s yiaddr = %v, not the leaser's address", typ, yiaddr)
		}
	default:
		t.Fatalf("unexpected reply type %s", typ)
	}
	if _, err := dhcpv4.FromBytes(resp.ToBytes()); err != nil {
		t.Fatalf("reply does not parse back: %v", err)
	}
}

// fuzzLeaser behaves like the inventory: the fake's reservation and pool, both reachable from
// fuzzed packets (nodeMAC is in the seeds), and it is stateless so runs stay independent.
type fuzzLeaser struct{}

func (fuzzLeaser) Lease(mac net.HardwareAddr, pxe, _ bool) (Lease, bool, error) {
	if bytes.Equal(mac, nodeMAC) {
		return Lease{IP: nodeIP, Hostname: "c1", Duration: nodeLease}, true, nil
	}
	if pxe {
		return Lease{IP: poolIP, Duration: poolLease}, true, nil
	}
	return Lease{}, false, nil
}

func (fuzzLeaser) Release(net.HardwareAddr, netip.Addr, bool) {}
