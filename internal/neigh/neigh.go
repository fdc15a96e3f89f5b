// Package neigh reads the kernel's IPv4 neighbour (ARP) table: which MAC answered for an
// address on the segment, a second witness besides the address a request claims to come from.
package neigh

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
)

// ErrUnknown is returned when the table has no complete entry for the address.
var ErrUnknown = errors.New("no neighbour entry")

// arpPath is the table as the kernel shows it for this network namespace.
var arpPath = "/proc/net/arp"

// MAC returns the hardware address the neighbour table holds for addr.
func MAC(addr netip.Addr) (string, error) {
	f, err := os.Open(arpPath)
	if err != nil {
		return "", fmt.Errorf("neighbour table: %w", err)
	}
	defer f.Close()
	return lookup(f, addr)
}

// lookup parses /proc/net/arp: "IP address HW type Flags HW address Mask Device". Flags 0x2
// (ATF_COM) marks a complete entry; an incomplete one has a zero MAC.
func lookup(r io.Reader, addr netip.Addr) (string, error) {
	want := addr.String()
	sc := bufio.NewScanner(r)
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[0] != want {
			continue
		}
		if f[2] == "0x0" || f[3] == "00:00:00:00:00:00" {
			break
		}
		return strings.ToLower(f[3]), nil
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: %w", addr, ErrUnknown)
}
