package dhcpd

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/ratelog"
)

// Lease is the address a Leaser hands to one MAC.
type Lease struct {
	IP       netip.Addr
	Hostname string // set for assigned nodes, empty for discovery leases
	Duration time.Duration
}

// Leaser is what the handler needs from the inventory (declared here, by the consumer).
// Serve calls it from one goroutine per packet, so it must be safe for concurrent use.
type Leaser interface {
	// Lease returns mac's address: its reservation when it is an assigned node; otherwise, when pxe is
	// true, a short discovery lease. ok=false means: do not answer (not a PXE client and not
	// assigned); a non-nil err means the pool is exhausted or storage failed (log it, no answer).
	// bind is true for a REQUEST (the answer is an ACK: the lease must be durable first) and false for
	// a DISCOVER (an OFFER binds nothing, so the lease may still be on its way to storage). Only a
	// DISCOVER allocates: a REQUEST from a client holding no discovery lease gets an error wrapping
	// ErrNoLease (NAK), so REQUESTs from made-up MACs take no address.
	Lease(mac net.HardwareAddr, pxe, bind bool) (l Lease, ok bool, err error)
	// Release frees mac's discovery lease on addr (DHCPRELEASE), or marks addr bad (declined=true,
	// DHCPDECLINE); a lease on another address is not mac's to release.
	Release(mac net.HardwareAddr, addr netip.Addr, declined bool)
}

// ErrNoLease is what a Leaser wraps when a REQUEST's client holds no lease to bind.
var ErrNoLease = errors.New("client holds no lease")

// Options is the network the handler describes to clients. internal/config validates it; the
// handler only skips what is unset.
type Options struct {
	ServerIP netip.Addr
	Subnet   netip.Prefix // netmask (option 1)
	Router   netip.Addr   // zero: no option 3
	DNS      []netip.Addr // empty: no option 6
	Domain   string       // empty: no option 15
	HTTPBase string       // e.g. "http://10.80.0.1" or "http://10.80.0.1:8080" (no trailing slash)
	Meter    Meter        // counts the exchanges; nil: none
	// Loaders picks UEFI PCs' loaders and hears which PCs start theirs; nil: ipxe.efi for all.
	Loaders Loaders
}

// Loaders is what the handler needs to pick a UEFI PC's first-stage loader: iPXE with its own
// drivers (ipxe.efi), or with the firmware's network driver (snponly.efi), which works on boards
// that hang in ipxe.efi. It also hears which PCs' loaders never start (Secure Boot refuses them).
type Loaders interface {
	// UEFILoader is the loader file for mac: ipxe.efi or snponly.efi.
	UEFILoader(mac net.HardwareAddr) string
	// Firmware records that mac's firmware (not iPXE) asked to netboot: file is the loader an ACK
	// gave it, "" for a DISCOVER (a new attempt).
	Firmware(mac net.HardwareAddr, file string)
	// IPXE records that iPXE runs on mac: its loader started.
	IPXE(mac net.HardwareAddr)
}

// Meter counts what the listener does (internal/metrics implements it). Serve calls it from
// one goroutine per packet.
type Meter interface {
	// DHCPExchange counts one request answered by Serve: its message type and the reply's (both
	// lower case, "none" for no reply), and the time from the parsed packet to the reply sent.
	DHCPExchange(request, reply string, took time.Duration)
	// DHCPError counts a failure by kind: "lease" (the Leaser failed: pool exhausted, storage),
	// "send" (a reply not sent), "panic" (a request that made the handler panic).
	DHCPError(kind string)
}

// noMeter counts nothing.
type noMeter struct{}

func (noMeter) DHCPExchange(string, string, time.Duration) {}
func (noMeter) DHCPError(string)                           {}

// Handler answers DHCPv4 requests for one segment.
type Handler struct {
	opts     Options
	serverIP net.IP
	network  []dhcpv4.Option // options 1, 3, 6, 15: the same in every positive reply
	leaser   Leaser
	log      logrus.FieldLogger
	// remote rate-limits the lines any client can trigger at will: a flood of DISCOVERs from
	// made-up MACs exhausts the pool, and each further one would log a "no lease" line.
	remote *ratelog.Limiter
	// stopped ends the handler with Serve: each packet's goroutine holds it for reading while it
	// works, and Serve takes it for writing as it stops, so Serve returns once no packet is being
	// answered (bootd compacts the inventory next) and no packet is answered after.
	stopped sync.RWMutex
}

// NewHandler returns a handler serving opts with addresses from leaser. A nil log discards.
func NewHandler(opts Options, leaser Leaser, log logrus.FieldLogger) *Handler {
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	opts.HTTPBase = strings.TrimRight(opts.HTTPBase, "/")
	if opts.Meter == nil {
		opts.Meter = noMeter{}
	}
	return &Handler{
		opts:     opts,
		serverIP: ipv4(opts.ServerIP),
		network:  networkOptions(opts),
		leaser:   leaser,
		log:      log,
		remote:   ratelog.New(ratelog.Every),
	}
}

// Reply returns the answer to req, or nil when bootd must stay silent. It has no side effects
// apart from the Leaser and logging, and never panics on a parsed packet.
func (h *Handler) Reply(req *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	if req == nil {
		return nil
	}
	log := h.log.WithFields(logrus.Fields{
		"mac":  req.ClientHWAddr.String(),
		"xid":  req.TransactionID.String(),
		"type": req.MessageType().String(),
	})
	log.Debug("dhcp request")
	if reason := h.unserved(req); reason != "" {
		log.WithField("reason", reason).Debug("dhcp request ignored")
		return nil
	}
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		return h.offer(req, log)
	case dhcpv4.MessageTypeRequest:
		return h.request(req, log)
	case dhcpv4.MessageTypeRelease:
		h.release(req, false, log)
	case dhcpv4.MessageTypeDecline:
		h.release(req, true, log)
	case dhcpv4.MessageTypeInform:
		return h.inform(req, log)
	default:
		log.Debug("dhcp message type not served")
	}
	return nil
}

// unserved says why req is none of bootd's business, or "" when it is.
func (h *Handler) unserved(req *dhcpv4.DHCPv4) string {
	switch {
	case req.OpCode != dhcpv4.OpcodeBootRequest:
		return "not a boot request"
	case req.HWType != iana.HWTypeEthernet || len(req.ClientHWAddr) != 6:
		// The inventory is keyed by Ethernet MAC; lab PCs have nothing else.
		return "not an ethernet client"
	case !isZero(req.GatewayIPAddr):
		// bootd serves the segment it sits on; a relayed request belongs to another subnet,
		// where none of its addresses would work.
		return "relayed request"
	case !h.forUs(req):
		return "server identifier names another server"
	}
	return ""
}

// forUs reports whether req names no server or names bootd (option 54). A client that chose
// another server's offer tells us so with a REQUEST naming it: that is not ours to answer.
func (h *Handler) forUs(req *dhcpv4.DHCPv4) bool {
	if !req.Options.Has(dhcpv4.OptionServerIdentifier) {
		return true
	}
	return req.ServerIdentifier().Equal(h.serverIP)
}

// offer answers a DISCOVER with the client's lease; an OFFER binds nothing (see Leaser).
func (h *Handler) offer(req *dhcpv4.DHCPv4, log logrus.FieldLogger) *dhcpv4.DHCPv4 {
	c := classify(req)
	l, found := h.lookup(req, c, false, log)
	if found != leaseFound {
		return nil
	}
	return h.leaseReply(req, dhcpv4.MessageTypeOffer, c, l, log)
}

// found is what lookup found for a client.
type found int

const (
	noAnswer   found = iota // none of our business, or the Leaser failed: stay silent
	noLease                 // a REQUEST's client holds no lease: NAK, as the segment's authoritative server
	leaseFound              // answer with the lease
)

// lookup asks the Leaser for req's lease, logging why there is none.
func (h *Handler) lookup(req *dhcpv4.DHCPv4, c client, bind bool, log logrus.FieldLogger) (Lease, found) {
	l, ok, err := h.leaser.Lease(req.ClientHWAddr, c.pxe, bind)
	switch {
	case bind && errors.Is(err, ErrNoLease):
		h.remote.Log(log.WithField("requested", requested(req).String()), logrus.InfoLevel,
			"dhcp nak: the client holds no lease (it will DISCOVER again)")
		return Lease{}, noLease
	case err != nil:
		h.opts.Meter.DHCPError("lease")
		h.remote.Log(log.WithError(err), logrus.WarnLevel, "no lease for client")
		return Lease{}, noAnswer
	case !ok:
		log.WithField("pxe", c.pxe).Debug("unknown client that is not PXE booting: not answered")
		return Lease{}, noAnswer
	case !l.IP.Is4():
		log.WithField("ip", l.IP.String()).Error("leaser returned a non-IPv4 address")
		return Lease{}, noAnswer
	}
	return l, leaseFound
}

// request answers a REQUEST: ACK when the requested address is the client's lease, NAK otherwise.
// A PXE client we hold no lease for is NAKed too, also one rebooting with an address from
// elsewhere; a client that is neither PXE nor a node gets no answer at all. RFC 2131 4.3.2 has a
// server without the client's record stay silent, so that servers which do not share their
// records can coexist; bootd is the one DHCP server of its segment (SECURITY.md), and its NAK
// sends the client to DISCOVER at once instead of after its REQUEST's retries (ISC dhcpd's
// "authoritative", dnsmasq's --dhcp-authoritative).
func (h *Handler) request(req *dhcpv4.DHCPv4, log logrus.FieldLogger) *dhcpv4.DHCPv4 {
	c := classify(req)
	l, found := h.lookup(req, c, true, log)
	switch found {
	case noAnswer:
		return nil
	case noLease:
		return h.nak(req)
	}
	want := requested(req)
	if want != l.IP {
		h.remote.Log(log.WithFields(logrus.Fields{"requested": want.String(), "ip": l.IP.String()}),
			logrus.InfoLevel, "dhcp nak: requested address is not the client's lease")
		return h.nak(req)
	}
	return h.leaseReply(req, dhcpv4.MessageTypeAck, c, l, log)
}

// requested is the address a REQUEST asks for: option 50 while selecting or rebooting, ciaddr
// while renewing or rebinding (RFC 2131 4.3.2). Zero when it names none.
func requested(req *dhcpv4.DHCPv4) netip.Addr {
	if ip := req.RequestedIPAddress(); ip != nil {
		return addr(ip)
	}
	return addr(req.ClientIPAddr)
}

// release hands a RELEASE or DECLINE to the Leaser, with the address it names: ciaddr for a
// RELEASE, option 50 for a DECLINE (RFC 2131 table 5); one naming none is ignored. Neither gets an
// answer (RFC 2131 4.3.3-4), and any MAC can send them: logged at debug, so a flood fills no log.
func (h *Handler) release(req *dhcpv4.DHCPv4, declined bool, log logrus.FieldLogger) {
	a := addr(req.ClientIPAddr)
	if declined {
		a = netip.Addr{}
		if ip := req.RequestedIPAddress(); ip != nil {
			a = addr(ip)
		}
	}
	log = log.WithFields(logrus.Fields{"declined": declined, "ip": a.String()})
	if !a.Is4() || a.IsUnspecified() {
		log.Debug("dhcp release naming no address ignored")
		return
	}
	log.Debug("dhcp release")
	h.leaser.Release(req.ClientHWAddr, a, declined)
}

// inform answers an INFORM from a machine that configured its own address in our subnet with the
// network options only: no address, no lease time (RFC 2131 4.3.5). It asks the Leaser nothing,
// since nothing is leased, and ignores addresses outside the subnet, which are not ours to advise.
func (h *Handler) inform(req *dhcpv4.DHCPv4, log logrus.FieldLogger) *dhcpv4.DHCPv4 {
	ciaddr := addr(req.ClientIPAddr)
	if !h.opts.Subnet.Contains(ciaddr) {
		log.WithField("ciaddr", ciaddr.String()).Debug("dhcp inform from outside the subnet ignored")
		return nil
	}
	resp := h.newReply(req, dhcpv4.MessageTypeAck)
	if resp == nil {
		return nil
	}
	h.addNetwork(resp)
	log.WithField("ciaddr", ciaddr.String()).Debug("dhcp inform answered")
	return resp
}
