// Package arpprobe asks a segment whether an IPv4 address is already in use, the way RFC 5227
// probes before a host takes an address: an ARP request for the address from the interface's
// MAC with sender address 0.0.0.0 (so no neighbour cache learns anything from it), then a short
// wait for any ARP packet whose sender address is the probed one.
//
// bootd probes a discovery-pool address before it offers it to a new client, so a host that
// took the address by hand (no DHCP) is found before two machines answer at one address.
package arpprobe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ARP over Ethernet for IPv4 (RFC 826): the only kind a lab segment carries.
const (
	arpLen       = 28
	opRequest    = 1
	opReply      = 2
	hwEthernet   = 1
	protoIPv4    = 0x0800
	resendFactor = 2 // probes sent per Probe, spread over the timeout
)

// Prober probes addresses on one interface.
type Prober struct {
	ifname string
}

// New returns a prober for ifname. It opens nothing yet: each Probe uses its own socket, so
// concurrent probes (one per new client) never see each other's answers out of order.
func New(ifname string) *Prober { return &Prober{ifname: ifname} }

// Probe sends ARP probes for target on the interface and waits up to timeout. It returns the MAC
// of a host that claims target (an ARP reply or request with target as its sender address), or
// nil when nothing answered. An error means the probe could not be made (no such interface, no
// CAP_NET_RAW): the caller decides whether to go on unprobed.
func (p *Prober) Probe(ctx context.Context, target netip.Addr, timeout time.Duration) (net.HardwareAddr, error) {
	if !target.Is4() {
		return nil, fmt.Errorf("arp probe: %s is not an IPv4 address", target)
	}
	ifi, err := net.InterfaceByName(p.ifname)
	if err != nil {
		return nil, fmt.Errorf("arp probe: interface %s: %w", p.ifname, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("arp probe: interface %s has no Ethernet address", p.ifname)
	}
	f, err := open(ifi.Index)
	if err != nil {
		return nil, fmt.Errorf("arp probe on %s: %w", p.ifname, err)
	}
	defer f.Close()
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	req := Request(ifi.HardwareAddr, target)
	buf := make([]byte, 1500)
	for i := range resendFactor {
		if err := send(f, ifi.Index, req); err != nil {
			return nil, fmt.Errorf("arp probe on %s: send: %w", p.ifname, err)
		}
		// The first probe waits its share of the timeout, the last one what is left.
		wait := deadline
		if i < resendFactor-1 {
			wait = time.Now().Add(time.Until(deadline) / time.Duration(resendFactor-i))
		}
		if err := f.SetReadDeadline(wait); err != nil {
			return nil, fmt.Errorf("arp probe on %s: %w", p.ifname, err)
		}
		for {
			n, err := f.Read(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("arp probe on %s: read: %w", p.ifname, err)
			}
			if mac := Claimant(buf[:n], target, ifi.HardwareAddr); mac != nil {
				return mac, nil
			}
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			break
		}
	}
	return nil, ctx.Err()
}

// open returns a non-blocking AF_PACKET datagram socket for ARP bound to interface index, as an
// *os.File so reads take deadlines through the runtime's poller.
func open(index int) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind packet socket: %w", err)
	}
	return os.NewFile(uintptr(fd), "arp"), nil
}

// send broadcasts one ARP packet out of interface index.
func send(f *os.File, index int, pkt []byte) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: index, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	var serr error
	werr := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), pkt, 0, to)
		return !errors.Is(serr, unix.EAGAIN)
	})
	if werr != nil {
		return werr
	}
	return serr
}

// Request is an RFC 5227 probe for target from hardware address from: sender address 0.0.0.0,
// target hardware address zero.
func Request(from net.HardwareAddr, target netip.Addr) []byte {
	b := make([]byte, arpLen)
	binary.BigEndian.PutUint16(b[0:], hwEthernet)
	binary.BigEndian.PutUint16(b[2:], protoIPv4)
	b[4], b[5] = 6, 4
	binary.BigEndian.PutUint16(b[6:], opRequest)
	copy(b[8:14], from)
	// b[14:18] sender IP 0.0.0.0, b[18:24] target MAC zero
	t := target.As4()
	copy(b[24:28], t[:])
	return b
}

// Claimant returns the sender MAC of pkt (an ARP packet without Ethernet header) when it shows
// another host using target: a reply or a request whose sender address is target (RFC 5227
// 2.1.1). Our own packets (sender MAC self), malformed ones and others return nil.
func Claimant(pkt []byte, target netip.Addr, self net.HardwareAddr) net.HardwareAddr {
	if len(pkt) < arpLen ||
		binary.BigEndian.Uint16(pkt[0:]) != hwEthernet || binary.BigEndian.Uint16(pkt[2:]) != protoIPv4 ||
		pkt[4] != 6 || pkt[5] != 4 {
		return nil
	}
	if op := binary.BigEndian.Uint16(pkt[6:]); op != opRequest && op != opReply {
		return nil
	}
	sha := net.HardwareAddr(pkt[8:14])
	spa, _ := netip.AddrFromSlice(pkt[14:18])
	if spa != target || sha.String() == self.String() {
		return nil
	}
	return append(net.HardwareAddr(nil), sha...)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
