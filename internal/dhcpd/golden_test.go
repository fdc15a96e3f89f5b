package dhcpd

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/labcluster/gpucluster/internal/testkit/golden"
)

// TestGoldenReplies pins whole replies (every field and option, in the library's summary form),
// so that an unintended change to what a node receives shows up as a diff.
func TestGoldenReplies(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *dhcpv4.DHCPv4
	}{
		{"offer_bios_discovery", packet(t, dhcpv4.MessageTypeDiscover, unknownMAC, mods(pxeBIOS, uuid(testUUID))...)},
		{"ack_ipxe_node", packet(t, dhcpv4.MessageTypeRequest, nodeMAC, mods(ipxe, []dhcpv4.Modifier{
			requestIP(nodeIP), serverID(serverIP),
			dhcpv4.WithRequestedOptions(dhcpv4.OptionBootfileName, dhcpv4.OptionHostName)})...)},
		{"offer_http_boot", packet(t, dhcpv4.MessageTypeDiscover, unknownMAC, httpUEFI...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := NewHandler(testOptions(), &fakeLeaser{}, quietLog()).Reply(tc.req)
			if resp == nil {
				t.Fatal("no reply")
			}
			golden.Check(t, filepath.Join("testdata", tc.name+".golden"), []byte(resp.Summary()))
		})
	}
}

// seedPackets are the fuzz seed corpus: what real clients send.
func seedPackets(t testing.TB) map[string]*dhcpv4.DHCPv4 {
	return map[string]*dhcpv4.DHCPv4{
		"pxe_bios_discover": packet(t, dhcpv4.MessageTypeDiscover, unknownMAC, mods(pxeBIOS, uuid(testUUID), []dhcpv4.Modifier{
			dhcpv4.WithGeneric(dhcpv4.OptionClientNetworkInterfaceIdentifier, []byte{1, 2, 1}),
			dhcpv4.WithOption(dhcpv4.OptMaxMessageSize(1260))})...),
		"uefi_discover": packet(t, dhcpv4.MessageTypeDiscover, unknownMAC, mods(pxeUEFI7, uuid(testUUID))...),
		"http_discover": packet(t, dhcpv4.MessageTypeDiscover, unknownMAC, httpUEFI...),
		"ipxe_request": packet(t, dhcpv4.MessageTypeRequest, nodeMAC, mods(ipxe, []dhcpv4.Modifier{
			requestIP(nodeIP), serverID(serverIP),
			dhcpv4.WithRequestedOptions(dhcpv4.OptionBootfileName, dhcpv4.OptionHostName)})...),
		"release": packet(t, dhcpv4.MessageTypeRelease, unknownMAC, serverID(serverIP), dhcpv4.WithClientIP(poolIP.AsSlice())),
	}
}

// TestFuzzSeedCorpus keeps testdata/fuzz/FuzzReply in step with seedPackets (go test -update writes it).
func TestFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzReply")
	for name, p := range seedPackets(t) {
		t.Run(name, func(t *testing.T) {
			content := "go test fuzz v1\n[]byte(" + quoteBytes(p.ToBytes()) + ")\n"
			golden.Check(t, filepath.Join(dir, name), []byte(content))
		})
	}
}

// quoteBytes is a Go string literal of b escaping every byte that is not printable ASCII as \xNN,
// so that no run of bytes is read back as a UTF-8 rune.
func quoteBytes(b []byte) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, c := range b {
		switch {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			sb.WriteByte(c)
		default:
			fmt.Fprintf(&sb, "\\x%02x", c)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}
