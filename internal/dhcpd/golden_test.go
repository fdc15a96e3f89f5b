package dhcpd

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden and the fuzz seed corpus")

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
			golden(t, filepath.Join("testdata", tc.name+".golden"), resp.Summary())
		})
	}
}

// golden compares got with the file at path, or rewrites the file under -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("reply differs from %s (run with -update if intended):\n got:\n%s\nwant:\n%s", path, got, want)
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

// TestFuzzSeedCorpus keeps testdata/fuzz/FuzzReply in step with seedPackets (-update writes it).
func TestFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzReply")
	for name, p := range seedPackets(t) {
		t.Run(name, func(t *testing.T) {
			content := "go test fuzz v1\n[]byte(" + quoteBytes(p.ToBytes()) + ")\n"
			if *update {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			golden(t, filepath.Join(dir, name), content)
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
