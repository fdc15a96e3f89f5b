package dhcpd

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/sirupsen/logrus"
)

// The addresses below only ever appear inside DHCP payloads: tests send packets to 127.0.0.1 only.
var (
	serverIP   = netip.MustParseAddr("10.80.0.1")
	poolIP     = netip.MustParseAddr("10.80.0.200")
	nodeIP     = netip.MustParseAddr("10.80.0.101")
	otherIP    = netip.MustParseAddr("10.80.0.150")
	nodeMAC    = mustMAC("52:54:00:00:00:01")
	unknownMAC = mustMAC("52:54:00:00:00:02")
	testXID    = dhcpv4.TransactionID{0xde, 0xad, 0xbe, 0xef}
	testUUID   = append([]byte{0}, []byte("0123456789abcdef")...)
)

const (
	poolLease = 2 * time.Minute
	nodeLease = time.Hour
	httpBase  = "http://10.80.0.1:8080"
)

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func testOptions() Options {
	return Options{
		ServerIP: serverIP,
		Subnet:   netip.MustParsePrefix("10.80.0.0/24"),
		Router:   netip.MustParseAddr("10.80.0.254"),
		DNS:      []netip.Addr{netip.MustParseAddr("10.80.0.53"), netip.MustParseAddr("10.80.0.54")},
		Domain:   "lab.example",
		HTTPBase: httpBase + "/", // the handler trims the slash
	}
}

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	l.SetLevel(logrus.DebugLevel) // run the logging code, print nothing
	return l
}

// releaseCall records one Leaser.Release.
type releaseCall struct {
	mac      string
	ip       netip.Addr
	declined bool
}

// fakeLeaser reserves nodeIP for nodeMAC ("c1") and gives any PXE client poolIP.
type fakeLeaser struct {
	mu       sync.Mutex
	err      error
	pxeSeen  []bool
	released []releaseCall
}

func (f *fakeLeaser) Lease(mac net.HardwareAddr, pxe, _ bool) (Lease, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pxeSeen = append(f.pxeSeen, pxe)
	switch {
	case f.err != nil:
		return Lease{}, false, f.err
	case mac.String() == nodeMAC.String():
		return Lease{IP: nodeIP, Hostname: "c1", Duration: nodeLease}, true, nil
	case pxe:
		return Lease{IP: poolIP, Duration: poolLease}, true, nil
	}
	return Lease{}, false, nil
}

func (f *fakeLeaser) Release(mac net.HardwareAddr, ip netip.Addr, declined bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, releaseCall{mac.String(), ip, declined})
}

func (f *fakeLeaser) releases() []releaseCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]releaseCall(nil), f.released...)
}

// Client flavours, as their firmware announces itself.
var (
	pxeBIOS = []dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.INTEL_X86PC)),
	}
	pxeUEFI7 = []dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003016")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64)),
	}
	pxeUEFI9 = []dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00009:UNDI:003016")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_BC)),
	}
	httpUEFI = []dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("HTTPClient:Arch:00016:UNDI:003001")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64_HTTP)),
	}
	// iPXE sends its user class unencoded ("iPXE"), not as an RFC 3004 list.
	ipxe = []dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003010")),
		dhcpv4.WithOption(dhcpv4.OptClientArch(iana.EFI_X86_64)),
		dhcpv4.WithGeneric(dhcpv4.OptionUserClassInformation, []byte("iPXE")),
	}
)

// mods concatenates modifier lists.
func mods(lists ...[]dhcpv4.Modifier) []dhcpv4.Modifier {
	var all []dhcpv4.Modifier
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}

// packet builds a client message of type typ from mac with a fixed xid.
func packet(t testing.TB, typ dhcpv4.MessageType, mac net.HardwareAddr, m ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	t.Helper()
	p, err := dhcpv4.New(mods([]dhcpv4.Modifier{
		dhcpv4.WithHwAddr(mac),
		dhcpv4.WithTransactionID(testXID),
		dhcpv4.WithMessageType(typ),
	}, m)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func requestIP(a netip.Addr) dhcpv4.Modifier {
	return dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(a.AsSlice()))
}

func serverID(a netip.Addr) dhcpv4.Modifier {
	return dhcpv4.WithOption(dhcpv4.OptServerIdentifier(a.AsSlice()))
}
