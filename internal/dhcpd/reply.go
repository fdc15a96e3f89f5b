package dhcpd

import (
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/sirupsen/logrus"
)

// minLease is used when a Leaser returns a non-positive duration, which is a bug in the Leaser:
// a short lease brings the client back soon, once the bug is fixed.
const minLease = time.Minute

// newReply starts a reply of type typ to req: xid, chaddr, flags, option 61 and 82 (copied by
// NewReplyFromRequest), siaddr, option 54 and the client UUID.
func (h *Handler) newReply(req *dhcpv4.DHCPv4, typ dhcpv4.MessageType) *dhcpv4.DHCPv4 {
	resp, err := dhcpv4.NewReplyFromRequest(req,
		dhcpv4.WithMessageType(typ),
		dhcpv4.WithServerIP(h.serverIP),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(h.serverIP)),
	)
	if err != nil {
		// Only a failing random source gets here (a new packet draws a xid, then takes req's).
		h.log.WithError(err).Error("dhcp reply not built")
		return nil
	}
	echoUUID(req, resp)
	return resp
}

// echoUUID copies the client machine identifier (option 97, RFC 4578), which PXE clients expect
// back and NewReplyFromRequest leaves out. An empty one is not echoed: some ROMs reject it.
func echoUUID(req, resp *dhcpv4.DHCPv4) {
	if uuid := req.Options.Get(dhcpv4.OptionClientMachineIdentifier); len(uuid) > 0 {
		resp.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionClientMachineIdentifier, uuid))
	}
}

// leaseReply is an OFFER or ACK carrying lease l and, for a netbooting client, its boot file.
func (h *Handler) leaseReply(req *dhcpv4.DHCPv4, typ dhcpv4.MessageType, c client, l Lease, log logrus.FieldLogger) *dhcpv4.DHCPv4 {
	resp := h.newReply(req, typ)
	if resp == nil {
		return nil
	}
	resp.YourIPAddr = ipv4(l.IP)
	addLeaseTime(resp, l.Duration)
	h.addNetwork(resp)
	if l.Hostname != "" {
		resp.UpdateOption(dhcpv4.OptHostName(l.Hostname))
	}
	file := h.addBoot(req, resp, c)
	h.noteLoader(req, c, typ == dhcpv4.MessageTypeAck, file)
	log = log.WithFields(logrus.Fields{
		"ip": l.IP.String(), "hostname": l.Hostname, "arch": c.archName(), "bootfile": file,
	})
	if c.pxe && file == "" {
		// Still a lease: the Leaser decided this machine gets an address, and an assigned node
		// keeps its own whatever its firmware. It just cannot netboot from us.
		log.Warn("no boot loader for this client's firmware: lease without boot file")
	}
	log.Infof("dhcp %s", typ)
	return resp
}

// nak is a DHCPNAK: server identifier, client UUID, a message, nothing else (RFC 2131 table 3).
// The broadcast bit makes relays and clients without an address accept it.
func (h *Handler) nak(req *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	resp := h.newReply(req, dhcpv4.MessageTypeNak)
	if resp == nil {
		return nil
	}
	resp.ServerIPAddr = net.IPv4zero
	resp.SetBroadcast()
	resp.UpdateOption(dhcpv4.OptMessage("requested address is not this client's lease"))
	return resp
}

// addLeaseTime sets option 51 and the RFC 2131 defaults for T1 (58, 1/2) and T2 (59, 7/8).
func addLeaseTime(resp *dhcpv4.DHCPv4, d time.Duration) {
	// Only a non-positive duration is replaced: raising a short one would promise the client
	// longer than the store holds the address, and it could be leased twice.
	if d <= 0 {
		d = minLease
	}
	d = min(d, dhcpv4.MaxLeaseTime)
	resp.UpdateOption(dhcpv4.OptIPAddressLeaseTime(d))
	resp.UpdateOption(dhcpv4.OptRenewTimeValue(d / 2))
	resp.UpdateOption(dhcpv4.OptRebindingTimeValue(d / 8 * 7))
}

// addNetwork puts options 1, 3, 6 and 15 into resp.
func (h *Handler) addNetwork(resp *dhcpv4.DHCPv4) {
	for _, o := range h.network {
		resp.UpdateOption(o)
	}
}

// networkOptions builds options 1, 3, 6 and 15 once, skipping what opts leaves unset.
func networkOptions(opts Options) []dhcpv4.Option {
	var o []dhcpv4.Option
	if opts.Subnet.IsValid() && opts.Subnet.Addr().Is4() {
		o = append(o, dhcpv4.OptSubnetMask(net.CIDRMask(opts.Subnet.Bits(), 32)))
	}
	if opts.Router.Is4() {
		o = append(o, dhcpv4.OptRouter(ipv4(opts.Router)))
	}
	var dns []net.IP
	for _, a := range opts.DNS {
		if a.Is4() {
			dns = append(dns, ipv4(a))
		}
	}
	if len(dns) > 0 {
		o = append(o, dhcpv4.OptDNS(dns...))
	}
	if opts.Domain != "" {
		o = append(o, dhcpv4.OptDomainName(opts.Domain))
	}
	return o
}

// ipv4 converts a to the 4-byte net.IP the dhcpv4 package writes; zero becomes 0.0.0.0.
func ipv4(a netip.Addr) net.IP {
	if !a.Is4() {
		return net.IPv4zero.To4()
	}
	b := a.As4()
	return net.IP(b[:])
}

// addr converts an address read from a packet; anything but IPv4 becomes the zero Addr.
func addr(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}
	}
	a = a.Unmap()
	if !a.Is4() || a.IsUnspecified() {
		return netip.Addr{}
	}
	return a
}

// isZero reports whether a packet address field is unset.
func isZero(ip net.IP) bool {
	return !addr(ip).IsValid()
}
