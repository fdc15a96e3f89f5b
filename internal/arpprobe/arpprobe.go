// Package arpprobe asks a segment whether an IPv4 address is already in use, the way RFC 5227
// probes before a host takes an address: an ARP request for the address from the interface's
// MAC with sender address 0.0.0.0 (so no neighbour cache learns anything from it), then a short
// wait for any ARP packet whose sender address is the probed one.
//
// bootd probes a discovery-pool address before it offers it to a new client, so a host that
// took the address by hand (no DHCP) is found before two machines answer at one address.
package arpprobe

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ARP over Ethernet for IPv4 (RFC 826): the only kind a lab segment carries.
const (
	arpLen       = 28
	opRequest    = 1
	opReply      = 2
	hwEthernet   = 1
	protoIPv4    = 0x0800
	resendFactor = 2 // probes sent per address by Probe and Sweep, spread over the timeout
)

// Prober probes addresses on one interface, and watches its ARP traffic.
//
// All of it goes through one packet socket, opened on first use and kept: a storm of new clients
// means one re-probe each, and a socket per probe would have every socket receive every other
// probe's packets (quadratic), besides a netlink dump of all links per interface lookup.
type Prober struct {
	ifname string

	mu  sync.Mutex
	seg *segment
}

// New returns a prober for ifname. It opens nothing yet.
func New(ifname string) *Prober { return &Prober{ifname: ifname} }

// Probe sends ARP probes for target on the interface and waits up to timeout. It returns the MAC
// of a host that claims target (an ARP reply or request with target as its sender address), or
// nil when nothing answered. An error means the probe could not be made (no such interface, no
// CAP_NET_RAW): the caller decides whether to go on unprobed.
func (p *Prober) Probe(ctx context.Context, target netip.Addr, timeout time.Duration) (net.HardwareAddr, error) {
	found, err := p.sweep(ctx, []netip.Addr{target}, timeout, resendFactor)
	return found[target], err
}

// Reprobe is Probe with a single probe, for an address swept free moments ago and waited on for
// a millisecond or so: in that time a segment that lost one probe (a full queue) most likely
// loses the next too, and every broadcast costs every host on the segment.
func (p *Prober) Reprobe(ctx context.Context, target netip.Addr, timeout time.Duration) (net.HardwareAddr, error) {
	found, err := p.sweep(ctx, []netip.Addr{target}, timeout, 1)
	return found[target], err
}

// Sweep probes every address of targets at once and waits up to timeout for claims (less when
// every address is claimed). It returns the hosts found, by address (absent: nothing answered).
func (p *Prober) Sweep(ctx context.Context, targets []netip.Addr, timeout time.Duration) (map[netip.Addr]net.HardwareAddr, error) {
	return p.sweep(ctx, targets, timeout, resendFactor)
}

// sweep sends n probes per unanswered target, spread over timeout.
func (p *Prober) sweep(ctx context.Context, targets []netip.Addr, timeout time.Duration, n int) (map[netip.Addr]net.HardwareAddr, error) {
	for _, t := range targets {
		if !t.Is4() {
			return nil, fmt.Errorf("arp probe: %s is not an IPv4 address", t)
		}
	}
	seg, err := p.segment()
	if err != nil {
		return nil, err
	}
	mac, err := seg.refreshMAC()
	if err != nil {
		return nil, fmt.Errorf("arp probe on %s: %w", p.ifname, err)
	}
	c := seg.listen(targets)
	defer seg.forget(c)
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for i := range n {
		for _, t := range seg.unanswered(c) {
			if err := seg.sock.send(Request(mac, t)); err != nil {
				return nil, fmt.Errorf("arp probe on %s: send: %w", p.ifname, err)
			}
		}
		// The first round waits its share of the timeout, the last one what is left.
		wait := time.Until(deadline)
		if i < n-1 {
			wait /= time.Duration(n - i)
		}
		if !c.wait(ctx, wait) {
			break
		}
	}
	// Under load the reader may run late: what came in time is queued; take it before deciding.
	if err := seg.drain(); err != nil {
		return nil, fmt.Errorf("arp probe on %s: %w", p.ifname, err)
	}
	return seg.result(c), ctx.Err()
}

// Watch reads every ARP packet on the interface until ctx is done and calls seen with the sender
// address and MAC of each one that shows a host using an address (see Sender). seen must not
// block: probes wait while it runs. It is how bootd
// notices a host that takes a pool address by hand between sweeps. Answers to probes reach them
// sooner while it runs; without it, a probe takes its answers when its time is up.
func (p *Prober) Watch(ctx context.Context, seen func(netip.Addr, net.HardwareAddr)) error {
	seg, err := p.segment()
	if err != nil {
		return err
	}
	seg.mu.Lock()
	seg.seen = seen
	seg.mu.Unlock()
	if err := seg.sock.f.SetReadDeadline(time.Time{}); err != nil { // an earlier Watch's stop
		return err
	}
	defer func() {
		seg.mu.Lock()
		seg.seen = nil
		seg.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() { seg.sock.f.SetReadDeadline(time.Now()) })
	defer stop()
	rc, err := seg.sock.f.SyscallConn()
	if err != nil {
		return err
	}
	buf := make([]byte, 1500)
	for {
		var rerr error
		// Read and dispatch under readMu, which a probe's drain takes too: a packet is never
		// read here and handed out only after a probe has decided without it.
		err := rc.Read(func(fd uintptr) bool {
			seg.readMu.Lock()
			defer seg.readMu.Unlock()
			n, _, e := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			if errors.Is(e, unix.EAGAIN) {
				return false // wait until readable
			}
			if e == nil {
				seg.dispatch(buf[:n])
			}
			rerr = e
			return true
		})
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = rerr
		}
		if err != nil {
			return fmt.Errorf("arp watch on %s: read: %w", p.ifname, err)
		}
	}
}

// segment opens the prober's socket on first use; a failure is retried on the next call.
func (p *Prober) segment() (*segment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seg != nil {
		return p.seg, nil
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
	p.seg = &segment{sock: &socket{f: f, name: p.ifname, index: ifi.Index}, mac: ifi.HardwareAddr, listening: map[netip.Addr][]*collector{}}
	return p.seg, nil
}

// segment is the one socket and who listens for which address on it.
type segment struct {
	sock   *socket
	readMu sync.Mutex // one reader at a time: the watch, or a probe's drain

	mu        sync.Mutex
	mac       net.HardwareAddr // the interface's, as of the last sweep: a bridge's changes as ports come and go
	listening map[netip.Addr][]*collector
	seen      func(netip.Addr, net.HardwareAddr)
}

// refreshMAC reads the interface's MAC now (an ioctl: no netlink dump of every link). A bridge
// takes the lowest MAC of its ports unless one is set, so it changes when a port joins; a probe
// from a stale MAC would have its answer go to a MAC that is no longer ours.
func (g *segment) refreshMAC() (net.HardwareAddr, error) {
	// struct ifreq: the name, then a struct sockaddr (family, 14 bytes of address), padded to 40.
	var ifr struct {
		name   [unix.IFNAMSIZ]byte
		family uint16
		addr   [14]byte
		_      [8]byte
	}
	copy(ifr.name[:], g.sock.name)
	rc, err := g.sock.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, unix.SIOCGIFHWADDR, uintptr(unsafe.Pointer(&ifr)))
	}); err != nil {
		return nil, err
	}
	if errno != 0 {
		return nil, fmt.Errorf("interface MAC: %w", errno)
	}
	mac := net.HardwareAddr(append([]byte(nil), ifr.addr[:6]...))
	g.mu.Lock()
	g.mac = mac
	g.mu.Unlock()
	return mac, nil
}

// collector gathers the claims for one Sweep's addresses.
type collector struct {
	want  []netip.Addr
	found map[netip.Addr]net.HardwareAddr // under segment.mu
	all   chan struct{}                   // closed once every wanted address is claimed
}

func (g *segment) listen(addrs []netip.Addr) *collector {
	c := &collector{want: addrs, found: map[netip.Addr]net.HardwareAddr{}, all: make(chan struct{})}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range addrs {
		g.listening[a] = append(g.listening[a], c)
	}
	return c
}

func (g *segment) forget(c *collector) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range c.want {
		l := slices.DeleteFunc(g.listening[a], func(x *collector) bool { return x == c })
		if len(l) == 0 {
			delete(g.listening, a)
		} else {
			g.listening[a] = l
		}
	}
}

func (g *segment) unanswered(c *collector) []netip.Addr {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []netip.Addr
	for _, a := range c.want {
		if c.found[a] == nil {
			out = append(out, a)
		}
	}
	return out
}

func (g *segment) result(c *collector) map[netip.Addr]net.HardwareAddr {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(c.found)
}

// wait waits d, or less when every address is claimed; false means stop probing.
func (c *collector) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.all:
	case <-ctx.Done():
	}
	return false
}

// dispatch hands one packet's sender to the collectors waiting for its address, and to the watcher.
func (g *segment) dispatch(pkt []byte) {
	g.mu.Lock()
	a, mac := Sender(pkt, g.mac)
	if mac == nil {
		g.mu.Unlock()
		return
	}
	for _, c := range g.listening[a] {
		if c.found[a] == nil {
			c.found[a] = mac
			if len(c.found) == len(c.want) {
				close(c.all)
			}
		}
	}
	seen := g.seen
	g.mu.Unlock()
	if seen != nil {
		seen(a, mac)
	}
}

// drain dispatches the packets already queued on the socket without waiting.
func (g *segment) drain() error {
	rc, err := g.sock.f.SyscallConn()
	if err != nil {
		return err
	}
	g.readMu.Lock()
	defer g.readMu.Unlock()
	buf := make([]byte, 1500)
	for {
		var n int
		var rerr error
		if err := rc.Control(func(fd uintptr) { n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT) }); err != nil {
			return err
		}
		if errors.Is(rerr, unix.EAGAIN) {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("read: %w", rerr)
		}
		g.dispatch(buf[:n])
	}
}

// socket is an ARP packet socket on the prober's interface.
type socket struct {
	f     *os.File
	name  string
	index int
}

func (s *socket) send(pkt []byte) error { return send(s.f, s.index, pkt) }

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
	// Our own probes would come back to us (a sweep sends hundreds); skip them where the kernel
	// can (Linux 4.20+), and keep room for a storm's ARP traffic.
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
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

// Sender returns the sender address and MAC of pkt (an ARP packet without Ethernet header) when
// it shows a host using that address (RFC 5227 2.1.1): an ARP reply or request from another MAC
// than self with a sender address set. Probes (sender
// 0.0.0.0), our own packets and malformed ones return a nil MAC.
func Sender(pkt []byte, self net.HardwareAddr) (netip.Addr, net.HardwareAddr) {
	if len(pkt) < arpLen ||
		binary.BigEndian.Uint16(pkt[0:]) != hwEthernet || binary.BigEndian.Uint16(pkt[2:]) != protoIPv4 ||
		pkt[4] != 6 || pkt[5] != 4 {
		return netip.Addr{}, nil
	}
	if op := binary.BigEndian.Uint16(pkt[6:]); op != opRequest && op != opReply {
		return netip.Addr{}, nil
	}
	sha := net.HardwareAddr(pkt[8:14])
	spa, _ := netip.AddrFromSlice(pkt[14:18])
	if spa.IsUnspecified() || bytes.Equal(sha, self) {
		return netip.Addr{}, nil
	}
	return spa, append(net.HardwareAddr(nil), sha...)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
