package tftpd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pin/tftp/v3"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// content is what the test "binaries" hold: more than one 1468-byte block
// and not a multiple of any block size used here, so the last block is short.
var content = map[string][]byte{
	"undionly.kpxe": bytes.Repeat([]byte("bios loader "), 400),
	"ipxe.efi":      bytes.Repeat([]byte("uefi loader\n"), 700),
}

// ipxeDir writes the test binaries into a fresh directory.
func ipxeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range content {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// start serves root on 127.0.0.1 with a random port until the test ends.
func start(t *testing.T, root string) (string, *logtest.Hook) {
	t.Helper()
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	s, err := New(root, log)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := serve(t, s)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return addr, hook
}

// serve runs s on a loopback socket of its own; stop cancels it and waits for it to return.
func serve(t *testing.T, s *Server) (addr string, stop func() error) {
	t.Helper()
	conn := loopback(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- newService(s.root, s.log).serve(ctx, conn) }()
	return conn.LocalAddr().String(), func() error {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("serve returned %v after cancel, want nil", err)
			}
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("serve did not return after cancel")
		}
	}
}

// loopback is a UDP socket on 127.0.0.1 with a port of the kernel's choosing.
func loopback(t *testing.T) *net.UDPConn {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func client(t *testing.T, addr string, blksize int, tsize bool) *tftp.Client {
	t.Helper()
	c, err := tftp.NewClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetTimeout(time.Second)
	c.SetRetries(2)
	if blksize > 0 {
		c.SetBlockSize(blksize)
	}
	c.RequestTSize(tsize)
	return c
}

func TestFetch(t *testing.T) {
	addr, hook := start(t, ipxeDir(t))
	tests := []struct {
		name, path string
		blksize    int
		tsize      bool
	}{
		{"bios plain", "undionly.kpxe", 0, false},
		{"leading slash", "/undionly.kpxe", 0, false},
		{"uefi with options", "ipxe.efi", 1400, true},
		{"large blksize is capped", "ipxe.efi", 8192, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wt, err := client(t, addr, tt.blksize, tt.tsize).Receive(tt.path, "octet")
			if err != nil {
				t.Fatalf("Receive(%q): %v", tt.path, err)
			}
			want := content[strings.TrimPrefix(tt.path, "/")]
			// Size must be read before WriteTo, which consumes the options.
			if tt.tsize {
				if n, ok := wt.(tftp.IncomingTransfer).Size(); !ok || n != int64(len(want)) {
					t.Fatalf("tsize = %d, %v; want %d", n, ok, len(want))
				}
			}
			var buf bytes.Buffer
			if _, err := wt.WriteTo(&buf); err != nil {
				t.Fatalf("WriteTo: %v", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Fatalf("got %d bytes, want the %d bytes of the file", buf.Len(), len(want))
			}
		})
	}
	// Every transfer is logged at info with file, client, bytes, duration.
	// The server logs after the client's last ACK, so wait for the lines.
	var done []*logrus.Entry
	for deadline := time.Now().Add(5 * time.Second); len(done) < len(tests) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		done = nil
		for _, e := range hook.AllEntries() {
			if e.Message == "tftp transfer done" && e.Level == logrus.InfoLevel {
				done = append(done, e)
			}
		}
	}
	if len(done) != len(tests) {
		t.Fatalf("%d transfers logged at info, want %d", len(done), len(tests))
	}
	for _, e := range done {
		for _, k := range []string{"file", "client", "bytes", "duration"} {
			if _, ok := e.Data[k]; !ok {
				t.Errorf("transfer log lacks %q: %v", k, e.Data)
			}
		}
	}
}

func TestOptionNegotiation(t *testing.T) {
	addr, _ := start(t, ipxeDir(t))
	size := strconv.Itoa(len(content["ipxe.efi"]))
	tests := []struct {
		name string
		opts []string // name, value pairs sent in the RRQ
		want map[string]string
	}{
		{"blksize 1400 granted", []string{"blksize", "1400"}, map[string]string{"blksize": "1400"}},
		{"blksize capped", []string{"blksize", "9000"}, map[string]string{"blksize": strconv.Itoa(maxBlockSize)}},
		{"tsize answered", []string{"tsize", "0"}, map[string]string{"tsize": size}},
		{"both", []string{"blksize", "1024", "tsize", "0"}, map[string]string{"blksize": "1024", "tsize": size}},
		{"windowsize ignored", []string{"windowsize", "4", "tsize", "0"}, map[string]string{"tsize": size}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := rrq(t, addr, "ipxe.efi", tt.opts...)
			got, peer := readOACK(t, conn)
			if !equalMaps(got, tt.want) {
				t.Fatalf("OACK = %v, want %v", got, tt.want)
			}
			sendError(t, conn, peer, 8, "done") // end the transfer
		})
	}
}

// TestTSizeProbe plays UEFI firmware: ask with tsize=0, read the OACK, then
// abort with error 8. That is logged at debug, not as a failure.
func TestTSizeProbe(t *testing.T) {
	addr, hook := start(t, ipxeDir(t))
	conn := rrq(t, addr, "ipxe.efi", "tsize", "0", "blksize", "1468")
	if got, peer := readOACK(t, conn); got["tsize"] != strconv.Itoa(len(content["ipxe.efi"])) {
		t.Fatalf("OACK = %v, want the file size as tsize", got)
	} else {
		sendError(t, conn, peer, 8, "User aborted the transfer")
	}
	waitLog(t, hook, "tftp tsize probe: client aborted after the option ack, as UEFI firmware does")
	for _, e := range hook.AllEntries() {
		if e.Level <= logrus.WarnLevel {
			t.Errorf("probe logged at %s: %s %v", e.Level, e.Message, e.Data)
		}
	}
}

func TestRefusals(t *testing.T) {
	root := ipxeDir(t)
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600))
	must(t, os.WriteFile(filepath.Join(outside, "snponly.efi"), []byte("x"), 0o644))
	must(t, os.Mkdir(filepath.Join(root, "pxelinux"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "pxelinux.0"), []byte("x"), 0o644))
	// undionly.kpxe is replaced by a link out of root to a file of another name.
	must(t, os.Remove(filepath.Join(root, "undionly.kpxe")))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "undionly.kpxe")))
	addr, _ := start(t, root)
	for _, path := range []string{
		"undionly.kpxe",                  // symlink pointing outside root
		"/undionly.kpxe",                 // same, with a slash
		"../secret",                      // traversal
		"pxelinux/../ipxe.efi",           // traversal that lands on an allowed name
		"./ipxe.efi",                     // not a plain name
		"//ipxe.efi",                     // two slashes
		"/etc/passwd",                    // absolute, not allowed
		filepath.Join(outside, "secret"), // absolute path to a real file
		"pxelinux.0",                     // exists in root, not allowed
		`..\secret`,                      // backslash traversal
		`\ipxe.efi`,                      // backslash root
		"IPXE.EFI",                       // names are exact
		"snponly.efi",                    // allowed name, absent from root
	} {
		t.Run(path, func(t *testing.T) {
			_, err := client(t, addr, 0, false).Receive(path, "octet")
			if err == nil || !strings.Contains(err.Error(), "file not found") {
				t.Fatalf("Receive(%q) = %v, want a file not found error", path, err)
			}
		})
	}
}

// Refusals held back when serving stops are counted then, at their level: their window's timer
// would come too late. A worker writes the count before it exits, and bootd relays it.
func TestStopCountsHeldBackRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T, root string) (addr string, hook *logtest.Hook, stop func() error)
	}{
		{"server", func(t *testing.T, root string) (string, *logtest.Hook, func() error) {
			log, hook := logtest.NewNullLogger()
			s, err := New(root, log)
			if err != nil {
				t.Fatal(err)
			}
			addr, stop := serve(t, s)
			return addr, hook, stop
		}},
		{"worker", func(t *testing.T, root string) (string, *logtest.Hook, func() error) {
			return startWorkerAt(t, logrus.InfoLevel, testExe(t), root)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, hook, stop := tc.start(t, ipxeDir(t))
			checkServes(t, addr, "ipxe.efi") // a worker is serving
			for range 3 {
				if _, err := client(t, addr, 0, false).Receive("/etc/passwd", "octet"); err == nil {
					t.Fatal("/etc/passwd served")
				}
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			var counts []string
			for _, e := range hook.AllEntries() {
				if n, ok := e.Data["held_back"]; ok && e.Level == logrus.InfoLevel && e.Message == "tftp request refused: not an iPXE binary" {
					counts = append(counts, fmt.Sprint(n))
				}
			}
			if !slices.Equal(counts, []string{"2"}) {
				t.Errorf("held_back counts of 3 refusals after the stop: %v, want [2]", counts)
			}
		})
	}
}

func TestDistroLinkOutsideRoot(t *testing.T) {
	// Debian: /usr/lib/ipxe/ipxe.efi -> /boot/ipxe.efi. Served: same name.
	root, boot := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(filepath.Join(boot, "ipxe.efi"), content["ipxe.efi"], 0o644))
	must(t, os.Symlink(filepath.Join(boot, "ipxe.efi"), filepath.Join(root, "ipxe.efi")))
	addr, _ := start(t, root)
	wt, err := client(t, addr, 0, false).Receive("ipxe.efi", "octet")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil || !bytes.Equal(buf.Bytes(), content["ipxe.efi"]) {
		t.Fatalf("got %d bytes, %v; want the linked file", buf.Len(), err)
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T) string
		ok    bool
	}{
		{"all files", ipxeDir, true},
		{"one file", func(t *testing.T) string {
			dir := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dir, "snponly.efi"), []byte("x"), 0o644))
			return dir
		}, true},
		{"empty dir", func(t *testing.T) string { return t.TempDir() }, false},
		{"missing dir", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }, false},
		{"only other files", func(t *testing.T) string {
			dir := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dir, "pxelinux.0"), []byte("x"), 0o644))
			return dir
		}, false},
		{"allowed name is a directory", func(t *testing.T) string {
			dir := t.TempDir()
			must(t, os.Mkdir(filepath.Join(dir, "ipxe.efi"), 0o755))
			return dir
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, _ := logtest.NewNullLogger()
			_, err := New(tt.setup(t), log)
			if (err == nil) != tt.ok {
				t.Fatalf("New() error = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	log, _ := logtest.NewNullLogger()
	s, err := New(ipxeDir(t), log)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := serve(t, s)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The port is free again.
	ua, _ := net.ResolveUDPAddr("udp", addr)
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		t.Fatalf("port still bound: %v", err)
	}
	conn.Close()
}

// rrq sends a raw read request with options and returns the socket.
func rrq(t *testing.T, addr, file string, opts ...string) *net.UDPConn {
	t.Helper()
	return rrqFrom(t, "127.0.0.1", addr, file, opts...)
}

// rrqFrom is rrq from a fresh socket on the loopback address from (all of 127/8 is local), as
// another client would send it.
func rrqFrom(t *testing.T, from, addr, file string, opts ...string) *net.UDPConn {
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
	pkt := []byte{0, 1}
	for _, s := range append([]string{file, "octet"}, opts...) {
		pkt = append(append(pkt, s...), 0)
	}
	if _, err := conn.WriteToUDP(pkt, server); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readOACK reads the server's first answer, which must be an OACK, and
// returns its options and the transfer's address: the server answers from a
// new port (its TID), and the rest of the transfer goes there.
func readOACK(t *testing.T, conn *net.UDPConn) (map[string]string, *net.UDPAddr) {
	t.Helper()
	buf := make([]byte, 1500)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, from, err := conn.ReadFromUDP(buf)
	if err != nil {
		t.Fatal(err)
	}
	if op := binary.BigEndian.Uint16(buf[:2]); op != 6 {
		t.Fatalf("server answered opcode %d (%q), want OACK (6)", op, buf[2:n])
	}
	fields := strings.Split(strings.TrimSuffix(string(buf[2:n]), "\x00"), "\x00")
	opts := map[string]string{}
	for i := 0; i+1 < len(fields); i += 2 {
		opts[fields[i]] = fields[i+1]
	}
	return opts, from
}

func sendError(t *testing.T, conn *net.UDPConn, peer *net.UDPAddr, code uint16, msg string) {
	t.Helper()
	pkt := binary.BigEndian.AppendUint16([]byte{0, 5}, code)
	pkt = append(append(pkt, msg...), 0)
	if _, err := conn.WriteToUDP(pkt, peer); err != nil {
		t.Fatal(err)
	}
}

func waitLog(t *testing.T, hook *logtest.Hook, msg string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, e := range hook.AllEntries() {
			if e.Message == msg {
				return
			}
		}
	}
	t.Fatalf("no log line %q", msg)
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
