package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
	"github.com/pin/tftp/v3"
)

// pxeVendorClass is option 60 of a BIOS PXE 2.1 ROM (arch 0, UNDI 2.1).
const pxeVendorClass = "PXEClient:Arch:00000:UNDI:002001"

// tftpBlockSize is what the simulated ROM asks for: the largest block that fits a 1500-byte
// Ethernet frame, which both servers accept.
const tftpBlockSize = 1468

// httpFile is one file a client fetches over HTTP, with what it must receive.
type httpFile struct {
	Path   string // URL path, e.g. /images/compute/1/vmlinuz
	Size   int64
	SHA256 string
}

// clientSpec is what every client of a storm is told.
type clientSpec struct {
	Server   netip.Addr // the HTTP server (the lab's bridge address)
	WantBoot string     // the boot file DHCP must name (undionly.kpxe)
	BootSize int64      // its size and sha256, to check the TFTP transfer
	BootSHA  string
	Files    []httpFile
}

// clientResult is what one client measured.
type clientResult struct {
	DHCP                 time.Duration // DISCOVER sent (Start) .. ACK received
	Offer                time.Duration // DISCOVER sent .. OFFER received
	TFTPStart, TFTPEnd   time.Time
	TFTPBytes            int64
	HTTPStart, HTTPEnd   time.Time
	HTTPBytes            int64
	Start, End           time.Time
	Err                  error
	LeasedIP             netip.Addr
	BootFile, TFTPServer string
}

// client is one simulated PXE machine: its own namespace, whose eth0 (with its own MAC) is cabled
// to the lab's bridge.
type client struct {
	ns     *vlab.Netns
	mac    net.HardwareAddr
	verify bool // hash every file (client 0 only: proves the bytes, costs little)

	dhcp *nclient4.Client
}

// prepare opens the client's raw DHCP socket inside its namespace, before the storm starts, so
// that socket setup is not part of any figure.
func (c *client) prepare() error {
	return c.ns.Do(func() error {
		conn, err := dhcpConn("eth0", c.mac)
		if err != nil {
			return err
		}
		c.dhcp, err = nclient4.NewWithConn(conn, c.mac)
		return err
	})
}

// closeDHCP closes the DHCP socket prepare opened. storm calls it once every machine is done:
// closing a packet socket waits for an RCU grace period (packet_release: synchronize_net), ms
// in which the closing thread keeps its P, so closing right after the ACK held back the
// other machines' ACKs (two closes at once held both Ps until sysmon took them back, 10-20 ms).
// Until then the chaddr filter drops the socket's share of the downloads in the kernel.
func (c *client) closeDHCP() {
	if c.dhcp != nil {
		c.dhcp.Close()
		c.dhcp = nil
	}
}

// run boots the client once: DHCP as a BIOS PXE ROM, TFTP of the boot file it was given, then
// HTTP of kernel, initramfs and root image.
func (c *client) run(ctx context.Context, spec clientSpec) (r clientResult) {
	r.Start = time.Now()
	defer func() { r.End = time.Now() }()

	mods := pxeModifiers(c.mac)
	offer, err := c.dhcp.DiscoverOffer(ctx, mods...)
	r.Offer = time.Since(r.Start)
	var lease *nclient4.Lease
	if err == nil {
		lease, err = c.dhcp.RequestFromOffer(ctx, offer, mods...)
	}
	r.DHCP = time.Since(r.Start)
	if err != nil {
		r.Err = fmt.Errorf("dhcp: %w", err)
		return r
	}
	ack := lease.ACK
	ip, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
	r.LeasedIP = ip
	mask := ack.SubnetMask()
	if mask == nil {
		r.Err = errors.New("dhcp: ACK without a netmask")
		return r
	}
	if err := setAddr(c.ns, "eth0", ip, mask); err != nil {
		r.Err = err
		return r
	}

	r.BootFile = ack.BootFileName
	if r.BootFile == "" {
		r.BootFile = ack.BootFileNameOption()
	}
	if r.BootFile != spec.WantBoot {
		r.Err = fmt.Errorf("dhcp: boot file %q, want %q", r.BootFile, spec.WantBoot)
		return r
	}
	r.TFTPServer = tftpServer(ack)
	r.TFTPStart = time.Now()
	r.TFTPBytes, err = c.tftpGet(r.TFTPServer, r.BootFile, spec.BootSHA)
	r.TFTPEnd = time.Now()
	if err != nil {
		r.Err = fmt.Errorf("tftp %s from %s: %w", r.BootFile, r.TFTPServer, err)
		return r
	}
	if r.TFTPBytes != spec.BootSize {
		r.Err = fmt.Errorf("tftp %s: got %d bytes, want %d", r.BootFile, r.TFTPBytes, spec.BootSize)
		return r
	}

	hc := &http.Client{Transport: &http.Transport{
		DialContext:         c.dial,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 1,
	}}
	defer hc.CloseIdleConnections()
	r.HTTPStart = time.Now()
	for _, f := range spec.Files {
		n, err := c.httpGet(ctx, hc, "http://"+spec.Server.String()+f.Path, f)
		r.HTTPBytes += n
		if err != nil {
			r.Err = fmt.Errorf("http %s: %w", f.Path, err)
			return r
		}
	}
	r.HTTPEnd = time.Now()
	return r
}

// pxeModifiers make DISCOVER and REQUEST look like a BIOS PXE ROM's: vendor class, client
// architecture 0, network interface id UNDI 2.1, a machine UUID, the options a ROM asks for,
// and the broadcast flag (a ROM without an address cannot take unicast).
func pxeModifiers(mac net.HardwareAddr) []dhcpv4.Modifier {
	uuid := make([]byte, 17) // type 0 + 16 bytes, derived from the MAC
	copy(uuid[11:], mac)
	return []dhcpv4.Modifier{
		dhcpv4.WithBroadcast(true),
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier(pxeVendorClass)),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC)),
		dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionClientNetworkInterfaceIdentifier, []byte{1, 2, 1})),
		dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionClientMachineIdentifier, uuid)),
		dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer,
			dhcpv4.OptionHostName, dhcpv4.OptionDomainName, dhcpv4.OptionVendorSpecificInformation,
			dhcpv4.OptionClassIdentifier, dhcpv4.OptionTFTPServerName, dhcpv4.OptionBootfileName),
	}
}

// tftpServer is where a PXE ROM fetches its boot file: siaddr, else option 66, else the DHCP
// server itself.
func tftpServer(ack *dhcpv4.DHCPv4) string {
	if ip := ack.ServerIPAddr.To4(); ip != nil && !ip.IsUnspecified() {
		return ip.String()
	}
	if s := ack.TFTPServerName(); s != "" {
		return s
	}
	return ack.ServerIdentifier().String()
}

// tftpGet fetches file with the block size and tsize options a ROM sends, and counts the bytes
// (and checks them against sha, for the verifying client).
func (c *client) tftpGet(server, file, sha string) (int64, error) {
	tc, err := tftp.NewClient(net.JoinHostPort(server, "69"))
	if err != nil {
		return 0, err
	}
	tc.SetBlockSize(tftpBlockSize)
	tc.RequestTSize(true)
	var wt io.WriterTo
	// Receive opens the client's UDP socket: inside the namespace.
	if err := c.ns.Do(func() error {
		var err error
		wt, err = tc.Receive(file, "octet")
		return err
	}); err != nil {
		return 0, err
	}
	if !c.verify {
		return wt.WriteTo(io.Discard)
	}
	h := sha256.New()
	n, err := wt.WriteTo(h)
	if err == nil && hex.EncodeToString(h.Sum(nil)) != sha {
		err = fmt.Errorf("sha256 %x, want %s", h.Sum(nil), sha)
	}
	return n, err
}

// dial opens the HTTP connection from inside the client's namespace.
func (c *client) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := c.ns.Do(func() error {
		var err error
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// httpGet fetches one file, reading in large chunks so the client's own copying costs little,
// and checks its size (and content, for the verifying client).
func (c *client) httpGet(ctx context.Context, hc *http.Client, url string, f httpFile) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %s", resp.Status)
	}
	var h hash.Hash
	if c.verify {
		h = sha256.New()
	}
	buf := make([]byte, 256<<10)
	var n int64
	for {
		k, err := resp.Body.Read(buf)
		n += int64(k)
		if h != nil {
			h.Write(buf[:k])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
	}
	if n != f.Size {
		return n, fmt.Errorf("got %d bytes, want %d", n, f.Size)
	}
	if h != nil {
		if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
			return n, fmt.Errorf("sha256 %s, want %s", got, f.SHA256)
		}
	}
	return n, nil
}
