//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"

	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// segClient is a test machine on the lab segment with a static address outside the pool. From
// it the tests speak DHCP with any client MAC (chaddr), like many PCs would, and HTTP from any
// address bootd leased to one of those MACs (added to its interface).
type segClient struct {
	host   *vlab.Host
	ip     netip.Addr
	bits   int
	server netip.Addr
	conn   *net.UDPConn

	mu      sync.Mutex
	waiters map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4
	addrs   map[netip.Addr]bool
}

// newSegClient adds host name with MAC mac at address prefix (e.g. 10.80.0.250/24), and its DHCP
// socket on port 68; Close of the lab removes it.
func newSegClient(ctx context.Context, t *testing.T, lab *vlab.Lab, name, mac string, prefix netip.Prefix) *segClient {
	t.Helper()
	h, err := lab.AddHost(ctx, name, mustMAC(mac))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := h.Run(ctx, "ip", "addr", "add", prefix.String(), "dev", "eth0"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	c := &segClient{host: h, ip: prefix.Addr(), bits: prefix.Bits(), server: lab.Addr.Addr(),
		waiters: map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4{}, addrs: map[netip.Addr]bool{prefix.Addr(): true}}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BROADCAST, 1) })
		return errors.Join(err, serr)
	}}
	err = vlab.InNetns(h.Name, func() error {
		pc, err := lc.ListenPacket(ctx, "udp4", netip.AddrPortFrom(c.ip, dhcpv4.ClientPort).String())
		if err == nil {
			c.conn = pc.(*net.UDPConn)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.conn.Close() })
	go c.read()
	return c
}

// read hands every reply to the exchange waiting for its transaction id.
func (c *segClient) read() {
	buf := make([]byte, 1500)
	for {
		n, _, err := c.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		p, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			continue
		}
		c.mu.Lock()
		ch := c.waiters[p.TransactionID]
		c.mu.Unlock()
		if ch != nil {
			select {
			case ch <- p:
			default:
			}
		}
	}
}

// exchange broadcasts req and waits for a reply of type want (a NAK ends it too), resending
// up to tries times every timeout.
func (c *segClient) exchange(ctx context.Context, req *dhcpv4.DHCPv4, want dhcpv4.MessageType, timeout time.Duration, tries int) (*dhcpv4.DHCPv4, error) {
	ch := make(chan *dhcpv4.DHCPv4, 4)
	c.mu.Lock()
	c.waiters[req.TransactionID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiters, req.TransactionID)
		c.mu.Unlock()
	}()
	to := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}
	for range tries {
		if _, err := c.conn.WriteTo(req.ToBytes(), to); err != nil {
			return nil, err
		}
		timer := time.NewTimer(timeout)
	wait:
		for {
			select {
			case p := <-ch:
				if p.MessageType() == want || p.MessageType() == dhcpv4.MessageTypeNak {
					timer.Stop()
					if p.MessageType() != want {
						return p, fmt.Errorf("%s for %s: %s", p.MessageType(), req.ClientHWAddr, p.Message())
					}
					return p, nil
				}
			case <-timer.C:
				break wait
			case <-ctx.Done():
				timer.Stop()
				return nil, ctx.Err()
			}
		}
	}
	return nil, fmt.Errorf("no %s for %s (%s) after %d tries", want, req.ClientHWAddr, req.MessageType(), tries)
}

// pxeClient is what a BIOS PXE ROM says about itself.
var pxeClient = []dhcpv4.Modifier{
	dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
	dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 0}),
}

// discover sends one client's DISCOVER and returns the OFFER.
func (c *segClient) discover(ctx context.Context, mac net.HardwareAddr, timeout time.Duration, tries int) (*dhcpv4.DHCPv4, error) {
	req, err := dhcpv4.NewDiscovery(mac, pxeClient...)
	if err != nil {
		return nil, err
	}
	return c.exchange(ctx, req, dhcpv4.MessageTypeOffer, timeout, tries)
}

// dora runs a PXE client's whole exchange for mac and returns the address bootd acknowledged.
func (c *segClient) dora(ctx context.Context, mac net.HardwareAddr) (netip.Addr, error) {
	offer, err := c.discover(ctx, mac, time.Second, 3)
	if err != nil {
		return netip.Addr{}, err
	}
	req, err := dhcpv4.NewRequestFromOffer(offer, pxeClient...)
	if err != nil {
		return netip.Addr{}, err
	}
	ack, err := c.exchange(ctx, req, dhcpv4.MessageTypeAck, time.Second, 3)
	if err != nil {
		return netip.Addr{}, err
	}
	a, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
	return a, nil
}

// addAddr puts a on the client's interface, so it can speak from an address bootd leased.
func (c *segClient) addAddr(ctx context.Context, a netip.Addr) error {
	c.mu.Lock()
	have := c.addrs[a]
	c.addrs[a] = true
	c.mu.Unlock()
	if have {
		return nil
	}
	if out, err := c.host.Run(ctx, "ip", "addr", "add", netip.PrefixFrom(a, c.bits).String(), "dev", "eth0", "nodad"); err != nil {
		return fmt.Errorf("ip addr add %s: %v %s", a, err, out)
	}
	return nil
}

// dial opens a TCP connection to bootd's port from local address from (zero: the client's own).
func (c *segClient) dial(ctx context.Context, from netip.Addr, port int) (net.Conn, error) {
	if !from.IsValid() {
		from = c.ip
	}
	var conn net.Conn
	err := vlab.InNetns(c.host.Name, func() error {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}, Timeout: 5 * time.Second}
		var err error
		conn, err = d.DialContext(ctx, "tcp4", netip.AddrPortFrom(c.server, uint16(port)).String())
		return err
	})
	return conn, err
}

// http is a client whose connections come from address from inside the client's namespace.
func (c *segClient) http(from netip.Addr) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return c.dial(ctx, from, 80)
		},
	}}
}

// get fetches path from bootd as address from and returns status and body.
func (c *segClient) get(ctx context.Context, from netip.Addr, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.server.String()+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.http(from).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// netboot makes mac a machine waiting to be named, as its iPXE would: a DHCP lease, then the
// machine script from the leased address. It returns the lease.
func (c *segClient) netboot(ctx context.Context, mac net.HardwareAddr) (netip.Addr, error) {
	a, err := c.dora(ctx, mac)
	if err != nil {
		return a, err
	}
	if err := c.addAddr(ctx, a); err != nil {
		return a, err
	}
	status, body, err := c.get(ctx, a, "/ipxe/machine?mac="+strings.ReplaceAll(mac.String(), ":", "-"))
	if err != nil || status != 200 || !strings.Contains(body, "waiting to be named") {
		return a, fmt.Errorf("machine script for %s from %s: HTTP %d %v %.200q", mac, a, status, err, body)
	}
	return a, nil
}

// randomMAC is a locally administered unicast MAC.
func randomMAC() net.HardwareAddr {
	m := make(net.HardwareAddr, 6)
	_, _ = rand.Read(m)
	m[0] = m[0]&^1 | 2
	return m
}

// seqMAC is the i-th MAC of a test's series: 02:<series>:00:00:hi:lo.
func seqMAC(series byte, i int) net.HardwareAddr {
	return net.HardwareAddr{0x02, series, 0, 0, byte(i >> 8), byte(i)}
}
