package kickstart

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// NodeInfo is what one node's part of its kickstart says: its boot NIC and
// address, and where bootd is. It holds no secret, and must not.
type NodeInfo struct {
	Name, Role                string
	Address, Netmask, Gateway netip.Addr // Gateway zero: none
	DNS                       []netip.Addr
	Domain                    string // checked, not written: the overlay's keyfile sets the DNS search
	MAC                       string // the boot NIC
	BootdURL                  string // e.g. http://10.80.0.1
}

type nodeView struct {
	NodeInfo
	DNS        []string
	KernelArgs string
	Body       string
}

// Node returns n's kickstart: its network and root commands, body (the
// kickstart Image rendered for n's role), then a %post pointing the
// installed system at bootd. The %post comes last so that it runs after the
// image's, which writes the bootd units it enables.
func Node(body []byte, n NodeInfo, templates fs.FS) ([]byte, error) {
	r, err := NodeReader(bytes.NewReader(body), n, templates)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// maxHeader bounds each of the two comment lines NodeReader reads of a body.
const maxHeader = 4 << 10

// NodeReader is Node for a body read from r, as bootd reads an image's install.ks: it reads the
// body's first two lines (Write's header: the image, then its role, which must be n's) and
// returns a reader of the whole kickstart in which the rest of the body streams from r, never
// held whole (a layer file of a gigabyte is in it, base64).
func NodeReader(r io.Reader, n NodeInfo, templates fs.FS) (io.Reader, error) {
	if err := checkNode(n); err != nil {
		return nil, fmt.Errorf("kickstart for node %s: %w", n.Name, err)
	}
	body := bufio.NewReaderSize(r, maxHeader)
	var header []byte
	for range 2 {
		line, err := body.ReadSlice('\n')
		if err != nil {
			return nil, fmt.Errorf("kickstart for node %s: the body is not a kickstart of a %s image: %w", n.Name, n.Role, err)
		}
		header = append(header, line...)
	}
	if !bytes.HasSuffix(header, []byte("\n# role: "+n.Role+"\n")) {
		return nil, fmt.Errorf("kickstart for node %s: the body is not a kickstart of a %s image", n.Name, n.Role)
	}
	mac, _ := net.ParseMAC(n.MAC) // checkNode parsed it
	marker, err := newMarker()
	if err != nil {
		return nil, err
	}
	v := nodeView{NodeInfo: n, Body: marker, KernelArgs: bootArgs(n, mac)}
	v.MAC = mac.String()
	for _, a := range n.DNS {
		v.DNS = append(v.DNS, a.String())
	}
	text, err := render(templates, "node.ks.tmpl", v)
	if err != nil {
		return nil, err
	}
	head, tail, ok := bytes.Cut(text, []byte(marker))
	if !ok {
		return nil, fmt.Errorf("kickstart template node.ks.tmpl: no place for the image's body")
	}
	return io.MultiReader(bytes.NewReader(head), bytes.NewReader(header), body, bytes.NewReader(tail)), nil
}

// bootArgs are the arguments bootd's netboot gives a node (internal/httpd):
// dracut's static ip= on the BOOTIF NIC, nameserver= and bootd=, plus rd.neednet=1, which
// a disk boot needs to bring the network up in the initramfs.
func bootArgs(n NodeInfo, mac net.HardwareAddr) string {
	gw := ""
	if n.Gateway.IsValid() {
		gw = n.Gateway.String()
	}
	args := []string{
		fmt.Sprintf("ip=%s::%s:%s:%s::none", n.Address, gw, n.Netmask, n.Name),
		"BOOTIF=01-" + strings.ReplaceAll(mac.String(), ":", "-"),
	}
	// The initramfs's NetworkManager connection, which the booted node keeps, gets DNS only so.
	for _, a := range n.DNS {
		args = append(args, "nameserver="+a.String())
	}
	return strings.Join(append(args, "rd.neednet=1", "bootd="+n.BootdURL), " ")
}

func checkNode(n NodeInfo) error {
	if !isHostLabel(n.Name) {
		return fmt.Errorf("name %q is not a host name", n.Name)
	}
	if n.Role != "master" && n.Role != "compute" {
		return fmt.Errorf("role %q is neither master nor compute", n.Role)
	}
	if err := checkAddrs(n); err != nil {
		return err
	}
	if mac, err := net.ParseMAC(n.MAC); err != nil || len(mac) != 6 {
		return fmt.Errorf("mac %q is not an Ethernet address", n.MAC)
	}
	for _, label := range strings.Split(n.Domain, ".") {
		if n.Domain != "" && !isHostLabel(label) {
			return fmt.Errorf("domain %q is not a DNS domain", n.Domain)
		}
	}
	return checkBootdURL(n.BootdURL)
}

func checkAddrs(n NodeInfo) error {
	if !n.Address.Is4() {
		return fmt.Errorf("address %v is not IPv4", n.Address)
	}
	if !n.Netmask.Is4() || !isMask(n.Netmask) {
		return fmt.Errorf("netmask %v is not an IPv4 netmask", n.Netmask)
	}
	if n.Gateway.IsValid() && !n.Gateway.Is4() {
		return fmt.Errorf("gateway %v is not IPv4", n.Gateway)
	}
	for _, a := range n.DNS {
		if !a.IsValid() {
			return fmt.Errorf("invalid DNS server address")
		}
	}
	return nil
}

func isMask(a netip.Addr) bool {
	b := a.As4()
	m := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return m != 0 && m|(m-1) == ^uint32(0) // ones, then zeros
}

// checkBootdURL wants a plain http(s) URL: it goes on the kernel command
// line, split at blanks, inside a double-quoted kickstart argument.
func checkBootdURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("bootd url %q is not an http or https URL", s)
	}
	if err := checkWord(s); err != nil {
		return fmt.Errorf("bootd url: %w", err)
	}
	return nil
}

func isHostLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	return strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == ""
}
