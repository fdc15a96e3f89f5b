package dhcpd

import (
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// Loader names: the files tftpd and httpd serve from the iPXE directory.
const (
	biosLoader = "undionly.kpxe"
	uefiLoader = "ipxe.efi"
)

// Vendor class prefixes (option 60) of firmware netboot clients (PXE 2.1, UEFI 2.5 HTTP boot).
const (
	pxeClass  = "PXEClient"
	httpClass = "HTTPClient"
)

// client is what a request says about the machine's boot firmware.
type client struct {
	pxe     bool // PXE ROM, UEFI HTTP boot or iPXE: a machine trying to netboot
	ipxe    bool // iPXE itself, already loaded: it wants the HTTP script, not the binary again
	http    bool // UEFI HTTP boot: it can only load a URL
	arch    iana.Arch
	hasArch bool
}

// classify reads option 60, 77 and 93 of req.
func classify(req *dhcpv4.DHCPv4) client {
	class := req.ClassIdentifier()
	c := client{
		ipxe: slices.Contains(req.UserClass(), "iPXE"),
		http: strings.HasPrefix(class, httpClass),
	}
	c.pxe = c.ipxe || c.http || strings.HasPrefix(class, pxeClass)
	c.arch, c.hasArch = clientArch(req, class)
	if c.hasArch && c.arch == iana.EFI_X86_64_HTTP {
		c.http = true
	}
	return c
}

// clientArch is option 93's first architecture or, for the odd ROM that omits option 93, the one
// PXE 2.1 puts in the vendor class ("PXEClient:Arch:00000:UNDI:002001").
func clientArch(req *dhcpv4.DHCPv4, class string) (iana.Arch, bool) {
	if archs := req.ClientArch(); len(archs) > 0 {
		return archs[0], true
	}
	fields := strings.Split(class, ":")
	if len(fields) < 3 || fields[1] != "Arch" {
		return 0, false
	}
	n, err := strconv.ParseUint(fields[2], 10, 16)
	if err != nil {
		return 0, false
	}
	return iana.Arch(n), true
}

// archName is the arch as logged: the IANA name, or "none" when the client sent none.
func (c client) archName() string {
	if !c.hasArch {
		return "none"
	}
	return c.arch.String()
}

// bootFile returns the first-stage loader for c, or "" when there is none to give: c is not
// netbooting, or its firmware is one bootd has no loader for. An HTTP-boot client only ever gets
// a URL: a TFTP name would make its firmware fail the boot.
func (h *Handler) bootFile(c client, mac net.HardwareAddr) string {
	switch {
	case !c.pxe:
		return ""
	case c.ipxe:
		// Break the chain-load loop: iPXE asking again gets the script, not itself.
		return h.opts.HTTPBase + "/boot.ipxe"
	case c.http:
		if c.hasArch && c.arch == iana.EFI_X86_64_HTTP {
			return h.opts.HTTPBase + "/ipxe/" + h.uefiLoader(mac)
		}
		return ""
	case !c.hasArch:
		return ""
	}
	switch c.arch {
	case iana.INTEL_X86PC:
		return biosLoader
	case iana.EFI_IA32, iana.EFI_X86_64, iana.EFI_BC:
		return h.uefiLoader(mac)
	}
	return ""
}

// uefiLoader is the UEFI loader mac gets: the Loaders' choice, ipxe.efi without them.
func (h *Handler) uefiLoader(mac net.HardwareAddr) string {
	if h.opts.Loaders == nil {
		return uefiLoader
	}
	return h.opts.Loaders.UEFILoader(mac)
}

// noteLoader tells the Loaders what a netbooting client's request says: iPXE runs (its loader
// started), or its firmware asks (a DISCOVER: a new attempt; an ACK: the loader it was given).
func (h *Handler) noteLoader(req *dhcpv4.DHCPv4, c client, ack bool, file string) {
	if h.opts.Loaders == nil || !c.pxe {
		return
	}
	switch {
	case c.ipxe:
		h.opts.Loaders.IPXE(req.ClientHWAddr)
	case ack:
		h.opts.Loaders.Firmware(req.ClientHWAddr, file)
	case req.MessageType() == dhcpv4.MessageTypeDiscover:
		h.opts.Loaders.Firmware(req.ClientHWAddr, "")
	}
}

// pxeDiscoveryControl is option 43 with PXE_DISCOVERY_CONTROL (sub-option 6) = 8: "boot the file
// named in this offer, skip boot server discovery". Some UEFI ROMs (Dell's, among others) look for
// it in an offer that carries option 60 PXEClient; without it they may try discovery on port 4011,
// which bootd does not serve.
var pxeDiscoveryControl = []byte{6, 1, 8, 255}

// addBoot puts the boot file and PXE options for c into resp and returns the file, "" when c
// gets none (and then no PXE options either).
func (h *Handler) addBoot(req, resp *dhcpv4.DHCPv4, c client) string {
	file := h.bootFile(c, req.ClientHWAddr)
	if file == "" {
		return ""
	}
	resp.BootFileName = file
	if req.IsOptionRequested(dhcpv4.OptionBootfileName) {
		// The file field holds 127 bytes; option 67 carries a longer URL whole.
		resp.UpdateOption(dhcpv4.OptBootFileName(file))
	}
	resp.UpdateOption(dhcpv4.OptTFTPServerName(h.opts.ServerIP.String()))
	if c.http {
		resp.UpdateOption(dhcpv4.OptClassIdentifier(httpClass))
		return file
	}
	resp.UpdateOption(dhcpv4.OptClassIdentifier(pxeClass))
	if !c.ipxe {
		resp.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionVendorSpecificInformation, pxeDiscoveryControl))
	}
	return file
}
