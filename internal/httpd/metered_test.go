package httpd

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// recordingMeter keeps what the listener counted.
type recordingMeter struct {
	mu       sync.Mutex
	requests []string // "route code bytes"
	refused  []string // "endpoint reason"
}

func (m *recordingMeter) HTTPRequest(route string, code int, took time.Duration, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if took <= 0 {
		route += " (no time)"
	}
	m.requests = append(m.requests, fmt.Sprintf("%s %d %d", route, code, bytes))
}

func (m *recordingMeter) NodeRequestRefused(endpoint, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refused = append(m.refused, endpoint+" "+reason)
}

func (m *recordingMeter) get() ([]string, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.requests...), append([]string(nil), m.refused...)
}

// TestMeteredRequests serves for real (Serve, with its sendfile path for files) and checks what
// the Meter is told: the pattern, the status and the bytes of each response, an extra handler's
// too, and the node API's refusals by reason.
func TestMeteredRequests(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte(strings.Repeat("k", 300000)), 0o644); err != nil {
		t.Fatal(err)
	}
	m := &recordingMeter{}
	log := logrus.New()
	log.SetOutput(io.Discard)
	extra := map[string]http.Handler{"GET /metrics": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "up 1\n") })}
	s := New(Options{BaseURL: "http://127.0.0.1", Netmask: netip.MustParseAddr("255.255.255.0"), Meter: m, Extra: extra},
		&fakeMachines{}, fakeFiles{t, dir}, &fakeNodes{}, log)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	base := "http://" + ln.Addr().String()
	for _, path := range []string{"/healthz", "/images/compute/1/vmlinuz", "/images/compute/1/missing", "/nowhere", "/metrics", "/api/v1/node/overlay"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	want := []string{
		"GET /healthz 200 3",
		"GET /images/{image}/{version}/{file} 200 300000",
		"GET /images/{image}/{version}/{file} 404 19",
		" 404 19",
		"GET /metrics 200 5",
		"GET /api/v1/node/overlay 403 10",
	}
	var requests, refused []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if requests, refused = m.get(); len(requests) == len(want) {
			break
		}
	}
	if strings.Join(requests, "\n") != strings.Join(want, "\n") {
		t.Errorf("counted\n%s\nwant\n%s", strings.Join(requests, "\n"), strings.Join(want, "\n"))
	}
	if strings.Join(refused, ",") != "overlay forbidden" {
		t.Errorf("refusals counted %q, want the overlay's, forbidden", refused)
	}
}
