package vlab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
)

// IPXEDir holds the iPXE binaries dnsmasq serves (Debian package ipxe).
var IPXEDir = "/usr/lib/ipxe"

// DnsmasqHost is a static DHCP reservation.
type DnsmasqHost struct {
	MAC      net.HardwareAddr
	Addr     netip.Addr
	Hostname string
}

// DnsmasqOptions configures the baseline DHCP + TFTP server.
type DnsmasqOptions struct {
	// ImageDir holds vmlinuz and initramfs.img (see BuildTestImage).
	ImageDir string
	// Hosts are the only machines that get an address: the range is static.
	Hosts []DnsmasqHost
	// ExtraCmdline is appended to the kernel command line, e.g.
	// "bootd=http://10.80.0.1".
	ExtraCmdline string
}

// bootScript is served to iPXE. One script fits all hosts: iPXE fills in the
// address, netmask, gateway and hostname of its own DHCP lease, which are the
// host's reservation. Relative file names resolve against the script's TFTP
// URL; initrd= lets the EFI stub find the initrd.
const bootScript = `#!ipxe
echo vlab: booting ${mac} as ${hostname} ${ip}
kernel vmlinuz ip=${ip}::${gateway}:${netmask}:${hostname}::none BOOTIF=01-${mac:hexhyp} console=ttyS0 initrd=initramfs.img %s
initrd initramfs.img
boot
`

// StartDnsmasq runs dnsmasq inside the namespace as the lab's DHCP + TFTP
// server, bound to the bridge only, with DNS off. dir receives the TFTP
// root (dir/tftp), the lease and pid files and dnsmasq.log. Boot files:
// iPXE (user class "iPXE") gets boot.ipxe, UEFI PXE (option 93 = 7) gets
// ipxe.efi, BIOS PXE gets undionly.kpxe.
func (l *Lab) StartDnsmasq(ctx context.Context, dir string, opts DnsmasqOptions) (*Process, error) {
	root := filepath.Join(dir, "tftp")
	if err := stageTFTP(root, opts); err != nil {
		return nil, fmt.Errorf("vlab: dnsmasq tftp root: %w", err)
	}
	p, err := l.Start(ctx, filepath.Join(dir, "dnsmasq.log"), "dnsmasq", l.dnsmasqArgs(dir, root, opts.Hosts)...)
	if err != nil {
		return nil, fmt.Errorf("vlab: dnsmasq: %w", err)
	}
	return p, nil
}

func (l *Lab) dnsmasqArgs(dir, root string, hosts []DnsmasqHost) []string {
	subnet := l.Addr.Masked()
	args := []string{
		"--keep-in-foreground", "--log-facility=-", "--log-dhcp",
		"--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--port=0",
		"--interface=" + l.Bridge, "--bind-interfaces",
		// Root so the test's private temporary directories stay readable.
		"--user=root", "--group=root",
		"--pid-file=" + filepath.Join(dir, "dnsmasq.pid"),
		"--dhcp-leasefile=" + filepath.Join(dir, "dnsmasq.leases"),
		fmt.Sprintf("--dhcp-range=%s,static,%s", subnet.Addr(), prefixMask(subnet.Bits())),
		"--enable-tftp", "--tftp-root=" + root,
		"--dhcp-userclass=set:ipxe,iPXE",
		"--dhcp-match=set:efi64,option:client-arch,7",
		// Exclusive tags: iPXE's own DHCP also sends option 93.
		"--dhcp-boot=tag:ipxe,boot.ipxe",
		"--dhcp-boot=tag:!ipxe,tag:efi64,ipxe.efi",
		"--dhcp-boot=tag:!ipxe,tag:!efi64,undionly.kpxe",
	}
	for _, h := range hosts {
		args = append(args, fmt.Sprintf("--dhcp-host=%s,%s,%s", h.MAC, h.Addr, h.Hostname))
	}
	return args
}

// prefixMask turns a prefix length into a dotted netmask.
func prefixMask(bits int) string {
	return net.IP(net.CIDRMask(bits, 32)).String()
}

// stageTFTP fills the TFTP root: iPXE binaries, the test image, boot.ipxe.
func stageTFTP(root string, opts DnsmasqOptions) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	copies := map[string]string{
		filepath.Join(IPXEDir, "ipxe.efi"):            "ipxe.efi",
		filepath.Join(IPXEDir, "undionly.kpxe"):       "undionly.kpxe",
		filepath.Join(opts.ImageDir, "vmlinuz"):       "vmlinuz",
		filepath.Join(opts.ImageDir, "initramfs.img"): "initramfs.img",
	}
	for src, name := range copies {
		if err := copyFile(src, filepath.Join(root, name)); err != nil {
			return err
		}
	}
	script := fmt.Sprintf(bootScript, opts.ExtraCmdline)
	return os.WriteFile(filepath.Join(root, "boot.ipxe"), []byte(script), 0o644)
}
