package power

import (
	"bytes"
	"fmt"
	"net"
	"syscall"
)

// MagicPacket is the Wake-on-LAN payload for mac: six 0xff bytes, then the MAC sixteen times.
func MagicPacket(mac net.HardwareAddr) []byte {
	p := bytes.Repeat([]byte{0xff}, 6)
	for range 16 {
		p = append(p, mac...)
	}
	return p
}

// wolPort is the discard port, where wakeonlan and etherwake's UDP form send: a NIC asleep
// matches the payload whatever the port, and a running host drops it.
const wolPort = 9

// SendMagicPacket broadcasts mac's magic packet as UDP on ifname only: the sleeping PC has no
// address, so the packet goes to every port of the lab's segment, and to no other network.
func SendMagicPacket(ifname string, mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("%s is not an Ethernet MAC", mac)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1); err != nil {
		return err
	}
	if err := syscall.BindToDevice(fd, ifname); err != nil {
		return fmt.Errorf("bind to %s: %w", ifname, err)
	}
	to := &syscall.SockaddrInet4{Port: wolPort, Addr: [4]byte{255, 255, 255, 255}}
	return syscall.Sendto(fd, MagicPacket(mac), 0, to)
}
