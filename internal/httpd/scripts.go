package httpd

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"text/template"

	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// chainScript sends iPXE on to the per-machine script with the facts only iPXE knows; the
// ":uristring" type makes iPXE escape the strings. Not for the UUID: uristring would
// encode its 16 raw bytes (NULs cut the URL); its own format is already URL-safe.
// On failure (bootd restarting, no image yet) it waits and asks again instead of letting the
// firmware fall through to the next boot device.
var chainScript = template.Must(template.New("boot.ipxe").Parse(`#!ipxe
:ask
echo bootd: asking for this machine's boot script
chain --autofree {{.}}/ipxe/machine?mac=${mac:hexhyp}&uuid=${uuid}&serial=${serial:uristring}&manufacturer=${manufacturer:uristring}&product=${product:uristring}&arch=${buildarch:uristring}&platform=${platform:uristring} || goto retry
:retry
echo bootd: no boot script yet, asking again in 10 seconds
sleep 10
goto ask
`))

// discoveryScript shows that the machine waits to be named and polls until it is; the poll
// answer is a script that fails while the machine still waits (so the loop goes on without
// nesting) or the boot script once it is assigned (so it boots on without a power cycle).
//
// A poll that fails without that answer (bootd refused it: the machine's discovery lease is gone,
// ended by a DHCPRELEASE or DHCPDECLINE anyone can forge with its MAC and address, or it was
// assigned and its address is now the node's; or bootd did not answer) makes the machine ask DHCP
// for an address again before the next poll: a new discovery lease, or its node address once it
// is assigned. Without that, a released machine was refused at every poll until power-cycled.
var discoveryScript = template.Must(template.New("discovery").Parse(`#!ipxe
echo
echo ================================================================
echo   bootd: this machine is waiting to be named.
echo
echo   MAC     {{.MAC}}
echo   model   {{.Model}}
echo   serial  {{.Serial}}
echo
echo   On the bootd appliance run:   bootd assign <name> --mac {{.MAC}}
echo   (or just: bootd assign <name>  when it is the only one waiting)
echo ================================================================
:poll
sleep {{.PollSeconds}}
set ` + waitingSetting + ` 0
chain --autofree {{.PollURL}} || goto unanswered
:unanswered
iseq ${` + waitingSetting + `} 1 && goto poll ||
echo bootd: poll refused or unanswered, asking DHCP for an address again
dhcp ||
goto poll
`))

// waitingSetting is the iPXE setting the poll answer sets while the machine waits, so that the
// discovery loop tells "still waiting" from a refused or failed poll.
const waitingSetting = "bootdwaiting"

// errorScript shows why a machine cannot boot yet and fails, so a polling machine asks again.
var errorScript = template.Must(template.New("error").Parse("#!ipxe\necho bootd: {{.}}\nsleep 10\nexit 1\n"))

// stillWaiting is the poll answer while the machine has no name: it fails, so the loop polls
// again, and says it was an answer (waitingSetting), so the loop does not ask DHCP again.
const stillWaiting = "#!ipxe\nset " + waitingSetting + " 1\nexit 1\n"

// targetScript boots a node into its role. initrd= names let the kernel's EFI stub find the
// initrds iPXE loaded; on failure it frees what it fetched and tries again rather than falling
// back to the next boot device.
var targetScript = template.Must(template.New("target").Parse(`#!ipxe
echo bootd: {{.Name}} ({{.Role}}, {{.Address}}) boots {{.Image}}/{{.Version}}
:retry
kernel {{.KernelURL}} {{.Args}} || goto failed
{{range .InitrdURLs}}initrd {{.}} || goto failed
{{end}}boot || goto failed
:failed
echo bootd: boot of {{.Name}} failed, trying again in 10 seconds
imgfree
sleep 10
goto retry
`))

type discoveryView struct {
	MAC, Model, Serial string
	PollSeconds        int
	PollURL            string
}

type targetView struct {
	Target
	KernelURL  string
	InitrdURLs []string
	Args       string
}

// KernelArgs is the kernel command line bootd gives t: initrd names, dracut's static ip= and
// BOOTIF=, the lab's DNS servers (nameserver=), where bootd is, what dracut does when the boot fails, the live root, then the image's
// own arguments (last, so an image built for debugging can ask for rd.shell again). Exported so
// the end-to-end tests that boot a kernel directly boot what a node gets.
func KernelArgs(opts Options, t Target) string {
	args := make([]string, 0, len(t.Initrds)+12)
	for _, name := range initrdNames(opts, t) {
		args = append(args, "initrd="+name)
	}
	gw := ""
	if opts.Gateway.IsValid() {
		gw = opts.Gateway.String()
	}
	args = append(args,
		fmt.Sprintf("ip=%s::%s:%s:%s::none", t.Address, gw, opts.Netmask, t.Name),
		"BOOTIF=01-"+strings.ReplaceAll(t.MAC.String(), ":", "-"))
	// The connection Rocky's initramfs makes from ip= (NetworkManager's nm-initrd-generator) is
	// the one the booted node keeps on its boot NIC, and ip= in this form carries no DNS: without
	// nameserver= the node has no DNS server. (No kernel argument carries a search domain: the
	// overlay's NetworkManager global DNS configuration adds it.)
	for _, dns := range opts.DNS {
		args = append(args, "nameserver="+dns.String())
	}
	args = append(args,
		"bootd="+opts.BaseURL,
		// A boot that fails in the initramfs (a root image bootd-verify refused, a root that
		// never came) stops the node: no root shell for whoever stands at its console
		// (rd.shell=0), and halt (rd.emergency=halt, dracut's choice with rd.shell=0, said
		// aloud): the machine stays on with the reason on its screen until someone looks. Not
		// reboot: a refused node would fetch and refuse the same image in a loop; not poweroff:
		// the reason would go dark with the screen, and dracut's die (which a refusal goes
		// through) halts under systemd whatever rd.emergency says.
		"rd.shell=0", "rd.emergency=halt")
	if t.Rootfs != "" {
		// dracut's live root: the initramfs fetches the squashfs over HTTP into RAM (kept
		// compressed), checks it against the manifest's hash, and mounts it under a tmpfs overlay.
		// targetView refuses a root image without a hash: bootd-verify boots one unchecked.
		args = append(args, "root=live:"+imageURL(opts.BaseURL, t, t.Rootfs), "rd.live.image", "rd.live.overlay.overlayfs=1",
			"rd.bootd.sha256="+t.RootfsSHA256)
		args = append(args, t.WritableArgs...)
		if chunked(opts, t) {
			// The node's fetch program (the extra initrd) rebuilds the root from this index,
			// checked against its hash, with what the node holds, its peers and bootd's chunks.
			args = append(args, "rd.bootd.index="+imageURL(opts.BaseURL, t, t.RootfsIndex), "rd.bootd.index.sha256="+t.RootfsIndexSHA256)
		}
	}
	if t.Cmdline != "" {
		args = append(args, t.Cmdline)
	}
	return strings.Join(args, " ")
}

func (s *Server) targetView(t Target) (targetView, error) {
	// Without rd.bootd.sha256= the node's bootd-verify would boot any root image unchecked.
	if t.Rootfs != "" && !sha256hex.Valid(t.RootfsSHA256) {
		return targetView{}, fmt.Errorf("image %s/%s: root image %s has no sha256 to check it against (%q)", t.Image, t.Version, t.Rootfs, t.RootfsSHA256)
	}
	v := targetView{Target: t, Args: KernelArgs(s.opts, t), KernelURL: imageURL(s.opts.BaseURL, t, t.Kernel)}
	for _, f := range t.Initrds {
		v.InitrdURLs = append(v.InitrdURLs, imageURL(s.opts.BaseURL, t, f))
	}
	if chunked(s.opts, t) {
		v.InitrdURLs = append(v.InitrdURLs, s.opts.BaseURL+"/node/"+url.PathEscape(s.opts.FetchInitrd))
	}
	// Everything goes into an iPXE script: refuse what iPXE would expand or split.
	for _, field := range append([]string{v.Args, v.KernelURL, t.Name, t.Role, t.Image, t.Version}, v.InitrdURLs...) {
		if err := scriptSafe(field); err != nil {
			return v, fmt.Errorf("image %s/%s: %w", t.Image, t.Version, err)
		}
	}
	return v, nil
}

// chunked reports whether t's root is fetched by chunks: the version has a chunk index with its
// hash, and bootd has the fetch program to send.
func chunked(opts Options, t Target) bool {
	return t.Rootfs != "" && t.RootfsIndex != "" && sha256hex.Valid(t.RootfsIndexSHA256) && opts.FetchInitrd != ""
}

// initrdNames are the initrds a node loads, in order: the image's, then bootd's fetch program.
func initrdNames(opts Options, t Target) []string {
	names := append([]string{}, t.Initrds...)
	if chunked(opts, t) {
		names = append(names, opts.FetchInitrd)
	}
	return names
}

func imageURL(base string, t Target, file string) string {
	return fmt.Sprintf("%s/images/%s/%s/%s", base, url.PathEscape(t.Image), url.PathEscape(t.Version), url.PathEscape(file))
}

func (s *Server) discoveryView(mac net.HardwareAddr, f Facts) discoveryView {
	q := url.Values{"mac": {strings.ReplaceAll(mac.String(), ":", "-")}, "poll": {"1"}}
	return discoveryView{
		MAC:         mac.String(),
		Model:       printable(strings.TrimSpace(f.Manufacturer+" "+f.Product), 64),
		Serial:      printable(f.Serial, 64),
		PollSeconds: max(1, int(s.opts.PollInterval.Seconds())),
		PollURL:     s.opts.BaseURL + "/ipxe/machine?" + q.Encode(),
	}
}

// scriptSafe refuses text that iPXE would interpret: settings expansion, line breaks, control characters.
func scriptSafe(s string) error {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r > 0x7e || r == '$' {
			return fmt.Errorf("%q contains %q, which an iPXE script cannot carry safely", s, r)
		}
	}
	return nil
}

// printable keeps text fit for an echo line: printable ASCII without "$", at most limit bytes.
func printable(s string, limit int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= limit {
			break
		}
		if r >= 0x20 && r < 0x7f && r != '$' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "-"
	}
	return b.String()
}
