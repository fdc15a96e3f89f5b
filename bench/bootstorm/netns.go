package main

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// setAddr gives ifname in namespace n the address and netmask a DHCP ACK carried, the way a
// PXE ROM's own stack takes its lease (ioctls rather than an `ip` process per client, so the
// clients' own overhead stays small next to the servers').
func setAddr(n *vlab.Netns, ifname string, addr netip.Addr, mask net.IPMask) error {
	return n.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq(ifname)
		if err != nil {
			return err
		}
		if err := ifr.SetInet4Addr(addr.AsSlice()); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFADDR, ifr); err != nil {
			return fmt.Errorf("set address %s on %s: %w", addr, ifname, err)
		}
		m, ok := netip.AddrFromSlice(net.IP(mask).To4())
		if !ok {
			return fmt.Errorf("netmask %v is not IPv4", mask)
		}
		if err := ifr.SetInet4Addr(m.AsSlice()); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFNETMASK, ifr); err != nil {
			return fmt.Errorf("set netmask %s on %s: %w", m, ifname, err)
		}
		return nil
	})
}

// dhcpConn is the client's DHCP socket: a raw IPv4 packet socket on ifname, as nclient4 opens
// it, with a BPF filter that keeps only UDP to port 68 whose chaddr is mac. Without the filter,
// every client's socket would queue (and nclient4 parse) every broadcast OFFER and ACK of the
// whole storm and every other client's DISCOVER: at N = 200 that is 160,000 packets of client
// work and overflowing socket buffers (lost replies, 5 s retransmissions) that real PXE ROMs,
// each with its own NIC filter and CPU, never pay. Call it inside the client's namespace.
func dhcpConn(ifname string, mac net.HardwareAddr) (net.PacketConn, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	filter, err := bpf.Assemble(chaddrFilter(mac))
	if err != nil {
		return nil, err
	}
	raw, err := packet.Listen(ifi, packet.Datagram, unix.ETH_P_IP, &packet.Config{Filter: filter})
	if err != nil {
		return nil, err
	}
	return nclient4.NewBroadcastUDPConn(raw, &net.UDPAddr{Port: nclient4.ClientPort}), nil
}

// chaddrFilter accepts an unfragmented IPv4 UDP packet to port 68 whose BOOTP chaddr (28 bytes
// into the UDP payload) is mac. The packet starts at the IP header (a datagram packet socket).
func chaddrFilter(mac net.HardwareAddr) []bpf.Instruction {
	const drop, accept = 0, 0xffff
	hi := uint32(mac[0])<<24 | uint32(mac[1])<<16 | uint32(mac[2])<<8 | uint32(mac[3])
	lo := uint32(mac[4])<<8 | uint32(mac[5])
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: 9, Size: 1}, // IP protocol
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_UDP, SkipFalse: 9},
		bpf.LoadAbsolute{Off: 6, Size: 2}, // flags + fragment offset
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: 7},
		bpf.LoadMemShift{Off: 0},          // X = IP header length
		bpf.LoadIndirect{Off: 2, Size: 2}, // UDP destination port
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: nclient4.ClientPort, SkipFalse: 4},
		bpf.LoadIndirect{Off: 8 + 28, Size: 4}, // chaddr[0:4]
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: hi, SkipFalse: 2},
		bpf.LoadIndirect{Off: 8 + 32, Size: 2}, // chaddr[4:6]
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: lo, SkipTrue: 1},
		bpf.RetConstant{Val: drop},
		bpf.RetConstant{Val: accept},
	}
}
