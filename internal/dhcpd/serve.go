package dhcpd

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/sirupsen/logrus"
)

// Serve answers DHCP on ifname until ctx is done, then returns nil. It binds 0.0.0.0:port, not the
// interface's address: a socket bound to a unicast address never sees the broadcasts PXE clients
// send. SO_BINDTODEVICE (set by server4 when given the interface name) keeps it to that one
// segment, so bootd never answers on the host's other networks.
func (h *Handler) Serve(ctx context.Context, ifname string, port int) error {
	conn, err := server4.NewIPv4UDPConn(ifname, &net.UDPAddr{IP: net.IPv4zero, Port: port})
	if err != nil {
		return fmt.Errorf("listen for dhcp on %s port %d: %w", ifname, port, err)
	}
	h.log.WithFields(logrus.Fields{"interface": ifname, "addr": conn.LocalAddr().String()}).
		Info("dhcp listening")
	return h.serveConn(ctx, ifname, conn)
}

// serveConn runs server4's read loop on conn until ctx is done or the loop fails, then waits for
// the packets in flight (server4 answers each in a goroutine of its own, untracked), and writes
// the counts of the lines its rate limit held back.
func (h *Handler) serveConn(ctx context.Context, ifname string, conn net.PacketConn) error {
	srv, err := server4.NewServer(ifname, nil, h.handle,
		server4.WithConn(conn), server4.WithLogger(serverLogger{h.log}))
	if err != nil {
		conn.Close()
		return fmt.Errorf("start dhcp server on %s: %w", ifname, err)
	}
	defer h.remote.Flush() // after stopped is taken below: no packet logs through it any more
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	select {
	case <-ctx.Done():
		// Never unlocked: a stopped handler answers nothing more. Taken before the socket closes,
		// so the packets in flight still get their answers out.
		h.stopped.Lock()
		srv.Close()
		<-done // the read loop fails on the closed socket: that is the way out
		return nil
	case err := <-done:
		h.stopped.Lock()
		return fmt.Errorf("serve dhcp on %s: %w", ifname, err)
	}
}

// handle is server4's per-packet callback. server4 has already turned a peer without an address
// into 255.255.255.255 at the client's port, which SO_BINDTODEVICE sends out of our interface; a
// renewing client's unicast is answered by unicast.
func (h *Handler) handle(conn net.PacketConn, peer net.Addr, req *dhcpv4.DHCPv4) {
	if !h.stopped.TryRLock() {
		return // Serve is stopping
	}
	defer h.stopped.RUnlock()
	defer func() {
		// Reply is fuzzed not to panic; should a Leaser panic, one packet must not take down
		// bootd's HTTP and TFTP listeners with it.
		if r := recover(); r != nil {
			h.opts.Meter.DHCPError("panic")
			h.log.WithField("panic", r).Error("dhcp handler panicked")
		}
	}()
	start := time.Now()
	resp := h.Reply(req)
	if resp == nil {
		h.opts.Meter.DHCPExchange(messageType(req), "none", time.Since(start))
		return
	}
	// RFC 2131 4.1: with no relay, a NAK is broadcast, since the client may no longer own the
	// address it renews from.
	if resp.MessageType() == dhcpv4.MessageTypeNak && resp.GatewayIPAddr.IsUnspecified() {
		peer = &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
	}
	_, err := conn.WriteTo(resp.ToBytes(), peer)
	h.opts.Meter.DHCPExchange(messageType(req), messageType(resp), time.Since(start))
	if err != nil {
		h.opts.Meter.DHCPError("send")
		h.log.WithError(err).WithFields(logrus.Fields{
			"mac": req.ClientHWAddr.String(), "peer": peer.String(),
		}).Warn("dhcp reply not sent")
	}
}

// serverLogger sends server4's own messages (read errors, unparsable packets) to the debug log;
// the handler logs every exchange itself.
type serverLogger struct{ log logrus.FieldLogger }

func (l serverLogger) PrintMessage(prefix string, m *dhcpv4.DHCPv4) {
	l.log.Debugf("dhcp %s: %s", prefix, m)
}

func (l serverLogger) Printf(format string, v ...any) {
	l.log.Debugf("dhcp server: "+format, v...)
}

// messageType names m's DHCP message type for a metric label: lower case, one of a fixed few.
func messageType(m *dhcpv4.DHCPv4) string {
	switch t := m.MessageType(); t {
	case dhcpv4.MessageTypeDiscover, dhcpv4.MessageTypeOffer, dhcpv4.MessageTypeRequest, dhcpv4.MessageTypeDecline,
		dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak, dhcpv4.MessageTypeRelease, dhcpv4.MessageTypeInform:
		return strings.ToLower(t.String())
	}
	return "other"
}
