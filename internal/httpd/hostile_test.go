package httpd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// anyNodes accepts every hardware report.
type anyNodes struct{}

func (anyNodes) Overlay(netip.AddrPort, *TPMKeys) (Overlay, error) { return Overlay{}, ErrForbidden }
func (anyNodes) Hello(netip.AddrPort, string) (Target, error)      { return Target{}, ErrForbidden }
func (anyNodes) ReportHardware(netip.AddrPort, string, []byte) (string, bool, error) {
	return "c4", false, nil
}
func (anyNodes) Kickstart(netip.Addr) (string, io.ReadCloser, error) { return "", nil, ErrForbidden }
func (anyNodes) Power(context.Context, netip.AddrPort, string, []byte) (string, []byte, error) {
	return "", nil, ErrForbidden
}

// serveLoopback runs the real Serve (server timeouts included) on 127.0.0.1.
func serveLoopback(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ipxe.efi"), []byte("efi"), 0o644); err != nil {
		t.Fatal(err)
	}
	return serveLoopbackFrom(t, dir)
}

// serveLoopbackFrom is serveLoopback with the files of dir.
func serveLoopbackFrom(t *testing.T, dir string) string {
	t.Helper()
	return serveLoopbackPhase(t, dir, nil)
}

// serveLoopbackPhase is serveLoopbackFrom with downloads yielding while phase says machines boot
// (nil: always).
func serveLoopbackPhase(t *testing.T, dir string, phase BootPhase) string {
	t.Helper()
	ln, cancel, served := startServing(t, testServer(t, dir, phase))
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// startLoopback runs the real Serve with the files of dir on a listener on 127.0.0.1 until cancel
// (at the latest when the test ends); served receives what Serve returned.
func startLoopback(t *testing.T, dir string) (ln net.Listener, cancel context.CancelFunc, served <-chan error) {
	t.Helper()
	return startServing(t, testServer(t, dir, nil))
}

// testServer serves the files of dir, to any machine, logging nowhere, its downloads yielding
// while phase says machines boot (nil: always).
func testServer(t *testing.T, dir string, phase BootPhase) *Server {
	log := logrus.New()
	log.SetOutput(io.Discard)
	return New(Options{BaseURL: "http://10.80.0.1", Phase: phase}, &fakeMachines{}, fakeFiles{t, dir}, anyNodes{}, log)
}

// startServing is startLoopback for a Server of the test's making.
func startServing(t *testing.T, s *Server) (ln net.Listener, cancel context.CancelFunc, served <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	return ln, cancel, done
}

// send writes req on a new connection and returns the status line of the answer ("" when the
// server closed without one) and how long that took.
func send(t *testing.T, addr, req string) (string, time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	go func() { _, _ = io.WriteString(c, req) }()
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), time.Since(start)
}

func TestHostileRequests(t *testing.T) {
	defer func(d time.Duration) { bodyTimeout = d }(bodyTimeout)
	bodyTimeout = 300 * time.Millisecond
	addr := serveLoopback(t)
	ok := func() {
		t.Helper()
		if line, _ := send(t, addr, "GET /ipxe/ipxe.efi HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.Contains(line, " 200 ") {
			t.Fatalf("a good request after the hostile one: %q", line)
		}
	}
	t.Run("1 MiB URL", func(t *testing.T) {
		if line, _ := send(t, addr, "GET /ipxe/"+strings.Repeat("a", 1<<20)+" HTTP/1.1\r\nHost: x\r\n\r\n"); line != "" && !strings.Contains(line, " 431 ") {
			t.Errorf("answer %q, want 431 or a closed connection", line)
		}
		ok()
	})
	t.Run("100 KiB of headers", func(t *testing.T) {
		var h strings.Builder
		for i := 0; h.Len() < 100<<10; i++ {
			fmt.Fprintf(&h, "X-%d: %s\r\n", i, strings.Repeat("b", 1000))
		}
		if line, _ := send(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n"+h.String()+"\r\n"); line != "" && !strings.Contains(line, " 431 ") {
			t.Errorf("answer %q, want 431 or a closed connection", line)
		}
		ok()
	})
	for _, tc := range []struct{ name, req string }{
		{"a body that never comes", "POST /api/v1/node/hardware HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n{"},
		{"a chunked body that never ends", "POST /api/v1/node/hardware HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n"},
		{"a GET with a body that never comes", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line, d := send(t, addr, tc.req)
			// The server answers (an error, or the GET's own answer) and closes, or just closes:
			// either way within the body timeout, not the 10 s this client would wait.
			if d >= 5*time.Second {
				t.Errorf("the server held the connection %s (answer %q)", d, line)
			}
			ok()
		})
	}
}

// Refusals are logged at most once per interval each: any machine on the segment can send them.
func TestRefusalsAreRateLimited(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	s := New(Options{BaseURL: "http://10.80.0.1"}, &fakeMachines{}, fakeFiles{t, t.TempDir()}, anyNodes{}, log)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	for range 50 {
		for _, path := range []string{"/api/v1/node/overlay", "/ipxe/machine?mac=52-54-00-00-00-66"} {
			if resp, _ := get(t, ts.URL+path); resp.StatusCode != http.StatusForbidden {
				t.Fatalf("%s: %s, want 403", path, resp.Status)
			}
		}
	}
	warnings := map[string]int{}
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel {
			warnings[e.Message]++
		}
	}
	want := map[string]int{"overlay refused": 1, "refused a machine script request": 1}
	if !maps.Equal(warnings, want) {
		t.Errorf("warnings for 50 refusals of each kind: %v, want %v", warnings, want)
	}
}

// Refusals held back when the server stops are counted then, at their level: their window's
// timer would come too late.
func TestStopCountsHeldBackRefusals(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	s := New(Options{BaseURL: "http://10.80.0.1"}, &fakeMachines{}, fakeFiles{t, t.TempDir()}, anyNodes{}, log)
	ln, cancel, served := startServing(t, s)
	addr := ln.Addr().String()
	for range 5 {
		if resp, _ := get(t, "http://"+addr+"/api/v1/node/overlay"); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("overlay: %s, want 403", resp.Status)
		}
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	var counts []any
	for _, e := range hook.AllEntries() {
		if n, ok := e.Data["held_back"]; ok && e.Level == logrus.WarnLevel && e.Message == "overlay refused" {
			counts = append(counts, n)
		}
	}
	if !slices.Equal(counts, []any{4}) {
		t.Errorf("held_back counts of 5 refusals after the stop: %v, want [4]", counts)
	}
}
