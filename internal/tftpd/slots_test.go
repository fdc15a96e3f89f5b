package tftpd

import (
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/testkit/testhook"
)

// silent reports whether the server sends conn nothing for a while: a dropped request.
func silent(t *testing.T, conn *net.UDPConn) bool {
	t.Helper()
	_, _, _, _, ok := tryAnswer(t, conn, 300*time.Millisecond)
	return !ok
}

// answer reads the server's first packet to conn: its opcode, block number or error code, the
// error text, and where it came from (the transfer's own port).
func answer(t *testing.T, conn *net.UDPConn) (op, n uint16, text string, from *net.UDPAddr) {
	t.Helper()
	op, n, text, from, ok := tryAnswer(t, conn, 5*time.Second)
	if !ok {
		t.Fatal("no answer")
	}
	return op, n, text, from
}

// tryAnswer is answer, waiting at most wait; ok is false when nothing came.
func tryAnswer(t *testing.T, conn *net.UDPConn, wait time.Duration) (op, n uint16, text string, from *net.UDPAddr, ok bool) {
	t.Helper()
	buf := make([]byte, 1500)
	conn.SetReadDeadline(time.Now().Add(wait))
	size, from, err := conn.ReadFromUDP(buf)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return 0, 0, "", nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	op, n = binary.BigEndian.Uint16(buf[:2]), binary.BigEndian.Uint16(buf[2:4])
	return op, n, strings.TrimSuffix(string(buf[4:size]), "\x00"), from, true
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
		wantDrop  bool     // no answer at all: the ROM asks again
	}{
		{"a client under its bound is served", 8, 2, []string{"127.0.0.1"}, "127.0.0.1", false},
		{"a client at its bound is dropped", 8, 2, []string{"127.0.0.1", "127.0.0.1"}, "127.0.0.1", true},
		{"another client is still served", 8, 2, []string{"127.0.0.1", "127.0.0.1"}, "127.0.0.2", false},
		{"at the total bound everyone is dropped", 3, 2, []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}, "127.0.0.4", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			setBounds(t, tc.total, tc.perClient, maxTransferTime)
			addr, _ := start(t, ipxeDir(t))
			for _, h := range tc.holders {
				holdTransfer(t, h, addr)
			}
			conn := rrqFrom(t, tc.client, addr, "ipxe.efi")
			if tc.wantDrop {
				if !silent(t, conn) {
					t.Fatal("a request past a bound was answered, want it dropped")
				}
				return
			}
			op, _, text, peer := answer(t, conn)
			if op != opDATA {
				t.Fatalf("answer: opcode %d %q; want data", op, text)
			}
			sendError(t, conn, peer, 0, "test over")
		})
	}
}

// A finished transfer gives its slot back, and a flood of dropped requests logs one warning.
func TestTransferSlotsComeBack(t *testing.T) {
	setBounds(t, 8, 1, maxTransferTime)
	addr, hook := start(t, ipxeDir(t))
	conn := rrqFrom(t, "127.0.0.1", addr, "ipxe.efi")
	op, _, text, peer := answer(t, conn)
	if op != opDATA {
		t.Fatalf("first transfer: opcode %d %q", op, text)
	}
	var flood []*net.UDPConn
	for range 20 {
		flood = append(flood, rrqFrom(t, "127.0.0.1", addr, "ipxe.efi"))
	}
	// The last request sent waits long enough for an answer to any of them.
	if !silent(t, flood[len(flood)-1]) {
		t.Fatal("a second transfer at once was answered, want it dropped")
	}
	for _, c := range flood {
		if _, _, _, _, ok := tryAnswer(t, c, time.Millisecond); ok {
			t.Fatal("a second transfer at once was answered, want it dropped")
		}
	}
	warnings := 0
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "too many transfers") {
			warnings++
		}
	}
	if warnings != 1 {
		t.Errorf("%d warnings for 20 dropped requests in a row, want 1", warnings)
	}
	sendError(t, conn, peer, 0, "aborted") // the client gives up: its slot comes back
	waitFor(t, "the aborted transfer's slot", func() bool {
		conn := rrqFrom(t, "127.0.0.1", addr, "ipxe.efi")
		op, _, _, peer, ok := tryAnswer(t, conn, 100*time.Millisecond)
		if ok && op == opDATA {
			sendError(t, conn, peer, 0, "aborted")
		}
		return ok && op == opDATA
	})
	if got := fetch(t, addr, "ipxe.efi"); string(got) != string(content["ipxe.efi"]) {
		t.Fatal("a client with a free slot did not get its file")
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

// setBounds sets the transfer bounds for one test; servers started after take them.
func setBounds(t *testing.T, total, perClient int, d time.Duration) {
	testhook.Set(t, &maxTransfers, total)
	testhook.Set(t, &maxPerClient, perClient)
	testhook.Set(t, &maxTransferTime, d)
}
