package tftpd

import (
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// rrqFrom sends a read request for file from a fresh socket on the loopback address from (all of
// 127/8 is local), as another client would.
func rrqFrom(t *testing.T, from, addr, file string) *net.UDPConn {
	t.Helper()
	server, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(from)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.WriteToUDP(append([]byte{0, 1}, file+"\x00octet\x00"...), server); err != nil {
		t.Fatal(err)
	}
	return conn
}

// answer reads the server's first packet to conn: its opcode, block number or error code, the
// error text, and where it came from (the transfer's own port).
func answer(t *testing.T, conn *net.UDPConn) (op, n uint16, text string, from *net.UDPAddr) {
	t.Helper()
	buf := make([]byte, 1500)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	size, from, err := conn.ReadFromUDP(buf)
	if err != nil {
		t.Fatal(err)
	}
	op, n = binary.BigEndian.Uint16(buf[:2]), binary.BigEndian.Uint16(buf[2:4])
	return op, n, strings.TrimSuffix(string(buf[4:size]), "\x00"), from
}

const (
	opDATA  = 3
	opACK   = 4
	opERROR = 5
)

// holdTransfer starts a transfer from client and never acknowledges its first block; the test's
// end aborts it, so the server's stop need not wait for its timeout.
func holdTransfer(t *testing.T, client, addr string) {
	t.Helper()
	conn := rrqFrom(t, client, addr, "ipxe.efi")
	op, _, text, peer := answer(t, conn)
	if op != opDATA {
		t.Fatalf("transfer for %s not started: opcode %d %q", client, op, text)
	}
	t.Cleanup(func() { sendError(t, conn, peer, 0, "test over") })
}

func TestTransferBounds(t *testing.T) {
	tests := []struct {
		name      string
		total     int
		perClient int
		holders   []string // clients holding one stalled transfer each, in order
		client    string   // then asks
		wantBusy  bool
	}{
		{"a client under its bound is served", 8, 2, []string{"127.0.0.1"}, "127.0.0.1", false},
		{"a client at its bound is refused", 8, 2, []string{"127.0.0.1", "127.0.0.1"}, "127.0.0.1", true},
		{"another client is still served", 8, 2, []string{"127.0.0.1", "127.0.0.1"}, "127.0.0.2", false},
		{"at the total bound everyone is refused", 3, 2, []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}, "127.0.0.4", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			setBounds(t, tc.total, tc.perClient, maxTransferTime)
			addr, _ := start(t, ipxeDir(t))
			for _, h := range tc.holders {
				holdTransfer(t, h, addr)
			}
			conn := rrqFrom(t, tc.client, addr, "ipxe.efi")
			op, _, text, peer := answer(t, conn)
			if op == opDATA {
				sendError(t, conn, peer, 0, "test over")
			}
			if busy := op == opERROR && text == errBusy.Error(); busy != tc.wantBusy {
				t.Fatalf("answer: opcode %d %q; want busy %v", op, text, tc.wantBusy)
			}
		})
	}
}

// A finished transfer gives its slot back, and a flood of refusals logs one warning.
func TestTransferSlotsComeBack(t *testing.T) {
	setBounds(t, 8, 1, maxTransferTime)
	addr, hook := start(t, ipxeDir(t))
	conn := rrqFrom(t, "127.0.0.1", addr, "ipxe.efi")
	op, _, text, peer := answer(t, conn)
	if op != opDATA {
		t.Fatalf("first transfer: opcode %d %q", op, text)
	}
	for range 20 {
		if op, _, text, _ := answer(t, rrqFrom(t, "127.0.0.1", addr, "ipxe.efi")); op != opERROR || text != errBusy.Error() {
			t.Fatalf("second transfer at once: opcode %d %q, want busy", op, text)
		}
	}
	warnings := 0
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "too many transfers") {
			warnings++
		}
	}
	if warnings != 1 {
		t.Errorf("%d warnings for 20 refusals in a row, want 1", warnings)
	}
	sendError(t, conn, peer, 0, "aborted") // the client gives up: its slot comes back
	waitFor(t, "the aborted transfer's slot", func() bool {
		conn := rrqFrom(t, "127.0.0.1", addr, "ipxe.efi")
		op, _, _, peer := answer(t, conn)
		if op == opDATA {
			sendError(t, conn, peer, 0, "aborted")
		}
		return op == opDATA
	})
	time.Sleep(50 * time.Millisecond) // for that last abort
	// One after the other, each giving its slot back when it ends.
	for range 3 {
		if got := fetch(t, addr, "ipxe.efi"); string(got) != string(content["ipxe.efi"]) {
			t.Fatal("a client with a free slot did not get its file")
		}
	}
}

func TestSlowTransferIsCut(t *testing.T) {
	setBounds(t, 8, 2, 50*time.Millisecond)
	addr, _ := start(t, ipxeDir(t))
	conn := rrqFrom(t, "127.0.0.1", addr, "ipxe.efi")
	for block := uint16(1); ; block++ {
		op, n, text, peer := answer(t, conn)
		if op == opERROR {
			if text != errTooSlow.Error() {
				t.Fatalf("error %q, want %q", text, errTooSlow)
			}
			return
		}
		if op != opDATA || n != block {
			t.Fatalf("got opcode %d block %d, want data block %d", op, n, block)
		}
		if block > 3 {
			t.Fatal("a client acknowledging slower than the transfer bound was not cut")
		}
		time.Sleep(30 * time.Millisecond)
		if _, err := conn.WriteToUDP([]byte{0, opACK, byte(n >> 8), byte(n)}, peer); err != nil {
			t.Fatal(err)
		}
	}
}

// setBounds sets the transfer bounds for one test.
func setBounds(t *testing.T, total, perClient int, d time.Duration) {
	oldTotal, oldPer, oldTime := maxTransfers, maxPerClient, maxTransferTime
	maxTransfers, maxPerClient, maxTransferTime = total, perClient, d
	t.Cleanup(func() { maxTransfers, maxPerClient, maxTransferTime = oldTotal, oldPer, oldTime })
}
