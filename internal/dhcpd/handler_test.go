package dhcpd

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// want is what a reply must say; the zero value of a field means "absent".
type want struct {
	typ       dhcpv4.MessageType // MessageTypeNone: no reply at all
	yiaddr    netip.Addr
	hostname  string
	bootFile  string
	class     string // option 60
	uuid      []byte // option 97
	leaseTime time.Duration
	network   bool // options 1, 3, 6, 15 and siaddr
	released  []releaseCall
	pxeAsked  []bool // the pxe argument of each Leaser.Lease call
}

func TestReply(t *testing.T) {
	for _, tc := range replyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			fl := &fakeLeaser{err: tc.leaseErr}
			h := NewHandler(testOptions(), fl, quietLog())
			resp := h.Reply(tc.req)
			checkReply(t, tc.req, resp, tc.want)
			if got := fl.releases(); !slices.Equal(got, tc.want.released) {
				t.Errorf("Release calls = %v, want %v", got, tc.want.released)
			}
			if tc.want.pxeAsked != nil && !slices.Equal(fl.pxeSeen, tc.want.pxeAsked) {
				t.Errorf("Lease(pxe) calls = %v, want %v", fl.pxeSeen, tc.want.pxeAsked)
			}
		})
	}
}

type replyCase struct {
	name     string
	req      *dhcpv4.DHCPv4
	leaseErr error
	want     want
}

func replyCases(t *testing.T) []replyCase {
	d, r := dhcpv4.MessageTypeDiscover, dhcpv4.MessageTypeRequest
	offer, ack, nak := dhcpv4.MessageTypeOffer, dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak
	pool := want{typ: offer, yiaddr: poolIP, leaseTime: poolLease, network: true, class: "PXEClient"}
	with := func(w want, f func(*want)) want { f(&w); return w }
	return []replyCase{
		{"bios discover", packet(t, d, unknownMAC, pxeBIOS...),
			nil, with(pool, func(w *want) { w.bootFile = "undionly.kpxe"; w.pxeAsked = []bool{true} })},
		{"uefi 7 discover", packet(t, d, unknownMAC, pxeUEFI7...),
			nil, with(pool, func(w *want) { w.bootFile = "ipxe.efi" })},
		{"uefi 9 discover", packet(t, d, unknownMAC, pxeUEFI9...),
			nil, with(pool, func(w *want) { w.bootFile = "ipxe.efi" })},
		{"uefi ia32 discover", packet(t, d, unknownMAC, archOnly(iana.EFI_IA32)...),
			nil, with(pool, func(w *want) { w.bootFile = "ipxe.efi" })},
		{"uefi http 16 discover", packet(t, d, unknownMAC, httpUEFI...),
			nil, with(pool, func(w *want) { w.bootFile = httpBase + "/ipxe/ipxe.efi"; w.class = "HTTPClient" })},
		{"http client with a tftp arch gets no tftp name", packet(t, d, unknownMAC,
			dhcpv4.WithOption(dhcpv4.OptClassIdentifier("HTTPClient:Arch:00007:UNDI:003001")),
			dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64))),
			nil, with(pool, func(w *want) { w.class = "" })},
		{"ipxe user class", packet(t, d, unknownMAC, ipxe...),
			nil, with(pool, func(w *want) { w.bootFile = httpBase + "/boot.ipxe" })},
		{"ipxe rfc 3004 user class", packet(t, d, unknownMAC,
			dhcpv4.WithUserClass("iPXE", true)),
			nil, with(pool, func(w *want) { w.bootFile = httpBase + "/boot.ipxe" })},
		{"arch from vendor class when option 93 is missing", packet(t, d, unknownMAC,
			dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003016"))),
			nil, with(pool, func(w *want) { w.bootFile = "ipxe.efi" })},
		{"unknown arch gets a lease without boot file", packet(t, d, unknownMAC, archOnly(iana.EFI_ARM64)...),
			nil, with(pool, func(w *want) { w.class = "" })},
		{"non-pxe unknown is not answered", packet(t, d, unknownMAC),
			nil, want{pxeAsked: []bool{false}}},
		{"non-pxe assigned gets its reservation, no boot file", packet(t, d, nodeMAC),
			nil, want{typ: offer, yiaddr: nodeIP, hostname: "c1", leaseTime: nodeLease, network: true}},
		{"pxe assigned gets reservation and boot file", packet(t, d, nodeMAC, pxeBIOS...),
			nil, want{typ: offer, yiaddr: nodeIP, hostname: "c1", leaseTime: nodeLease, network: true,
				class: "PXEClient", bootFile: "undionly.kpxe"}},
		{"uuid echoed", packet(t, d, unknownMAC, mods(pxeBIOS, uuid(testUUID))...),
			nil, with(pool, func(w *want) { w.bootFile = "undionly.kpxe"; w.uuid = testUUID })},
		{"empty uuid not echoed", packet(t, d, unknownMAC, mods(pxeBIOS, uuid([]byte{}))...),
			nil, with(pool, func(w *want) { w.bootFile = "undionly.kpxe" })},
		{"leaser error is not answered", packet(t, d, unknownMAC, pxeBIOS...),
			errors.New("pool exhausted"), want{}},
		{"request selecting", packet(t, r, unknownMAC, mods(pxeBIOS, []dhcpv4.Modifier{requestIP(poolIP), serverID(serverIP)})...),
			nil, with(pool, func(w *want) { w.typ = ack; w.bootFile = "undionly.kpxe" })},
		{"request renewing by ciaddr", packet(t, r, nodeMAC, dhcpv4.WithClientIP(nodeIP.AsSlice())),
			nil, want{typ: ack, yiaddr: nodeIP, hostname: "c1", leaseTime: nodeLease, network: true}},
		{"request for another address is naked", packet(t, r, unknownMAC, mods(pxeBIOS, []dhcpv4.Modifier{requestIP(otherIP)})...),
			nil, want{typ: nak}},
		{"request naming no address is naked", packet(t, r, unknownMAC, pxeBIOS...),
			nil, want{typ: nak}},
		{"request from a client holding no lease is naked", packet(t, r, unknownMAC, mods(pxeBIOS, []dhcpv4.Modifier{requestIP(poolIP)})...),
			fmt.Errorf("52:54:00:00:00:09: %w", ErrNoLease), want{typ: nak}},
		{"discover seeing the no-lease error is not answered", packet(t, d, unknownMAC, pxeBIOS...),
			fmt.Errorf("52:54:00:00:00:09: %w", ErrNoLease), want{}},
		{"request for another server is ignored", packet(t, r, unknownMAC, mods(pxeBIOS, []dhcpv4.Modifier{requestIP(poolIP), serverID(otherIP)})...),
			nil, want{}},
		{"request from unknown non-pxe is ignored", packet(t, r, unknownMAC, requestIP(poolIP)),
			nil, want{}},
		{"release", packet(t, dhcpv4.MessageTypeRelease, unknownMAC, serverID(serverIP), dhcpv4.WithClientIP(poolIP.AsSlice())),
			nil, want{released: []releaseCall{{unknownMAC.String(), poolIP, false}}}},
		{"release naming no address is ignored", packet(t, dhcpv4.MessageTypeRelease, unknownMAC, serverID(serverIP)),
			nil, want{}},
		{"release to another server is ignored", packet(t, dhcpv4.MessageTypeRelease, unknownMAC, serverID(otherIP)),
			nil, want{}},
		{"decline", packet(t, dhcpv4.MessageTypeDecline, unknownMAC, serverID(serverIP), requestIP(poolIP)),
			nil, want{released: []releaseCall{{unknownMAC.String(), poolIP, true}}}},
		{"decline naming no address is ignored", packet(t, dhcpv4.MessageTypeDecline, unknownMAC, serverID(serverIP),
			dhcpv4.WithClientIP(poolIP.AsSlice())), nil, want{}},
		{"inform", packet(t, dhcpv4.MessageTypeInform, unknownMAC, dhcpv4.WithClientIP(otherIP.AsSlice())),
			nil, want{typ: ack, network: true}},
		{"inform from outside the subnet is ignored", packet(t, dhcpv4.MessageTypeInform, unknownMAC,
			dhcpv4.WithClientIP(net.IPv4(192, 168, 1, 5))), nil, want{}},
		{"relayed request is ignored", packet(t, d, unknownMAC, mods(pxeBIOS, []dhcpv4.Modifier{
			dhcpv4.WithGatewayIP(net.IPv4(10, 81, 0, 1))})...), nil, want{}},
		{"boot reply is ignored", packet(t, d, unknownMAC, mods(pxeBIOS, []dhcpv4.Modifier{
			func(p *dhcpv4.DHCPv4) { p.OpCode = dhcpv4.OpcodeBootReply }})...), nil, want{}},
		{"non-ethernet is ignored", packet(t, d, unknownMAC, mods(pxeBIOS, []dhcpv4.Modifier{
			dhcpv4.WithHWType(iana.HWTypeInfiniband)})...), nil, want{}},
		{"bootp (no message type) is ignored", packet(t, d, nodeMAC,
			dhcpv4.WithoutOption(dhcpv4.OptionDHCPMessageType)), nil, want{}},
	}
}

func archOnly(a iana.Arch) []dhcpv4.Modifier {
	return []dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(a)),
	}
}

func uuid(b []byte) []dhcpv4.Modifier {
	return []dhcpv4.Modifier{dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, b)}
}

// checkReply compares resp with w, and checks what every reply must carry.
func checkReply(t *testing.T, req, resp *dhcpv4.DHCPv4, w want) {
	t.Helper()
	if w.typ == dhcpv4.MessageTypeNone {
		if resp != nil {
			t.Fatalf("got a reply, want none:\n%s", resp.Summary())
		}
		return
	}
	if resp == nil {
		t.Fatalf("no reply, want %s", w.typ)
	}
	checkHeader(t, req, resp, w)
	checkLease(t, resp, w)
	checkBoot(t, resp, w)
	if w.network {
		checkNetwork(t, resp)
	}
}

func checkHeader(t *testing.T, req, resp *dhcpv4.DHCPv4, w want) {
	t.Helper()
	if got := resp.MessageType(); got != w.typ {
		t.Errorf("type = %s, want %s", got, w.typ)
	}
	if resp.OpCode != dhcpv4.OpcodeBootReply || resp.TransactionID != req.TransactionID ||
		!bytes.Equal(resp.ClientHWAddr, req.ClientHWAddr) {
		t.Errorf("header = %s, want a reply to %s", resp, req)
	}
	if got := addr(resp.ServerIdentifier()); got != serverIP {
		t.Errorf("server identifier = %v, want %v", got, serverIP)
	}
	if got := resp.Options.Get(dhcpv4.OptionClientMachineIdentifier); !bytes.Equal(got, w.uuid) || (got == nil) != (w.uuid == nil) {
		t.Errorf("option 97 = %q (present %v), want %q", got, resp.Options.Has(dhcpv4.OptionClientMachineIdentifier), w.uuid)
	}
}

func checkLease(t *testing.T, resp *dhcpv4.DHCPv4, w want) {
	t.Helper()
	if got := addr(resp.YourIPAddr); got != w.yiaddr {
		t.Errorf("yiaddr = %v, want %v", got, w.yiaddr)
	}
	if got := resp.HostName(); got != w.hostname {
		t.Errorf("hostname = %q, want %q", got, w.hostname)
	}
	if w.leaseTime == 0 {
		for _, o := range []dhcpv4.OptionCode{dhcpv4.OptionIPAddressLeaseTime, dhcpv4.OptionRenewTimeValue, dhcpv4.OptionRebindingTimeValue} {
			if resp.Options.Has(o) {
				t.Errorf("option %v present, want none", o)
			}
		}
		return
	}
	lt, t1, t2 := resp.IPAddressLeaseTime(0), resp.IPAddressRenewalTime(0), resp.IPAddressRebindingTime(0)
	if lt != w.leaseTime || t1 != w.leaseTime/2 || t2 != w.leaseTime/8*7 {
		t.Errorf("lease/T1/T2 = %v/%v/%v, want %v and 1/2, 7/8 of it", lt, t1, t2, w.leaseTime)
	}
}

func checkBoot(t *testing.T, resp *dhcpv4.DHCPv4, w want) {
	t.Helper()
	if resp.BootFileName != w.bootFile {
		t.Errorf("boot file = %q, want %q", resp.BootFileName, w.bootFile)
	}
	if got := resp.ClassIdentifier(); got != w.class {
		t.Errorf("option 60 = %q, want %q", got, w.class)
	}
	if w.bootFile == "" {
		if resp.Options.Has(dhcpv4.OptionTFTPServerName) || resp.Options.Has(dhcpv4.OptionVendorSpecificInformation) {
			t.Errorf("PXE options without a boot file:\n%s", resp.Summary())
		}
		return
	}
	if got := resp.TFTPServerName(); got != serverIP.String() {
		t.Errorf("option 66 = %q, want %q", got, serverIP)
	}
	tftp := w.class == "PXEClient" && !bytes.Contains([]byte(w.bootFile), []byte("://"))
	if got := resp.Options.Has(dhcpv4.OptionVendorSpecificInformation); got != tftp {
		t.Errorf("option 43 present = %v, want %v (only for TFTP loaders)", got, tftp)
	}
}

func checkNetwork(t *testing.T, resp *dhcpv4.DHCPv4) {
	t.Helper()
	if got := addr(resp.ServerIPAddr); got != serverIP {
		t.Errorf("siaddr = %v, want %v", got, serverIP)
	}
	if got := resp.SubnetMask().String(); got != "ffffff00" {
		t.Errorf("netmask = %s, want ffffff00", got)
	}
	if got := resp.Router(); len(got) != 1 || !got[0].Equal(net.IPv4(10, 80, 0, 254)) {
		t.Errorf("router = %v, want 10.80.0.254", got)
	}
	if got := resp.DNS(); len(got) != 2 || !got[1].Equal(net.IPv4(10, 80, 0, 54)) {
		t.Errorf("dns = %v, want 10.80.0.53, 10.80.0.54", got)
	}
	if got := resp.DomainName(); got != "lab.example" {
		t.Errorf("domain = %q, want lab.example", got)
	}
}

func TestReplyMinimalOptions(t *testing.T) {
	// A lab without router, DNS or domain: those options are left out, not sent empty.
	h := NewHandler(Options{ServerIP: serverIP, Subnet: netip.MustParsePrefix("10.80.0.0/24")}, &fakeLeaser{}, quietLog())
	resp := h.Reply(packet(t, dhcpv4.MessageTypeDiscover, nodeMAC))
	if resp == nil {
		t.Fatal("no reply")
	}
	for _, o := range []dhcpv4.OptionCode{dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer, dhcpv4.OptionDomainName} {
		if resp.Options.Has(o) {
			t.Errorf("option %v present, want none", o)
		}
	}
	if !resp.Options.Has(dhcpv4.OptionSubnetMask) {
		t.Error("netmask missing")
	}
}

func TestReplyNakIsBare(t *testing.T) {
	h := NewHandler(testOptions(), &fakeLeaser{}, quietLog())
	resp := h.Reply(packet(t, dhcpv4.MessageTypeRequest, nodeMAC, requestIP(otherIP)))
	if resp == nil || resp.MessageType() != dhcpv4.MessageTypeNak {
		t.Fatalf("want a NAK, got %v", resp)
	}
	if !resp.IsBroadcast() || !isZero(resp.YourIPAddr) || !isZero(resp.ServerIPAddr) || resp.BootFileName != "" {
		t.Errorf("NAK carries more than it should:\n%s", resp.Summary())
	}
	for _, o := range []dhcpv4.OptionCode{dhcpv4.OptionIPAddressLeaseTime, dhcpv4.OptionHostName, dhcpv4.OptionSubnetMask} {
		if resp.Options.Has(o) {
			t.Errorf("NAK has option %v", o)
		}
	}
}
