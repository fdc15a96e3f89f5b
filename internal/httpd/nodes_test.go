package httpd

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

// fakeNodes treats requests from port 1 as the node c1 (a privileged port cannot be had in a
// test client, so the fake decides by a field the test sets).
type fakeNodes struct {
	allow    bool
	reported []byte
}

func (f *fakeNodes) Overlay(from netip.AddrPort) (string, []OverlayFile, error) {
	if !f.allow {
		return "", nil, fmt.Errorf("%s is not c1: %w", from, ErrForbidden)
	}
	return "c1", []OverlayFile{
		{Path: "/etc/hostname", Mode: 0o644, Data: []byte("c1\n")},
		{Path: "/etc/munge/munge.key", Mode: 0o400, UID: 900, GID: 900, Data: []byte("secret")},
	}, nil
}

func (f *fakeNodes) ReportHardware(from netip.AddrPort, report []byte) (string, bool, error) {
	if !f.allow {
		return "", false, ErrForbidden
	}
	changed := string(f.reported) != string(report)
	f.reported = report
	return "c1", changed, nil
}

func (f *fakeNodes) Kickstart(from netip.Addr) (string, io.ReadCloser, error) {
	if !f.allow {
		return "", nil, ErrForbidden
	}
	return "c1", io.NopCloser(strings.NewReader("network --hostname=c1\n")), nil
}

func (f *fakeNodes) Power(_ context.Context, from netip.AddrPort, request []byte) (string, []byte, error) {
	if !f.allow {
		return "", nil, fmt.Errorf("%s is not the master: %w", from, ErrForbidden)
	}
	if !strings.Contains(string(request), `"action"`) {
		return "", nil, fmt.Errorf("no action: %w", ErrInvalid)
	}
	return "master", []byte("c1 ipmi ok switched off\n"), nil
}

func nodeServer(t *testing.T, allow bool) (*httptest.Server, *fakeNodes) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	n := &fakeNodes{allow: allow}
	ts := httptest.NewServer(New(Options{BaseURL: "http://x"}, &fakeMachines{}, fakeFiles{t, t.TempDir()}, n, log).Handler())
	t.Cleanup(ts.Close)
	return ts, n
}

func TestOverlayTar(t *testing.T) {
	ts, _ := nodeServer(t, true)
	resp, err := http.Get(ts.URL + "/api/v1/node/overlay")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	gz, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %o %d:%d", h.Name, h.Mode, h.Uid, h.Gid))
	}
	want := "./etc/hostname 644 0:0,./etc/munge/munge.key 400 900:900"
	if strings.Join(got, ",") != want {
		t.Fatalf("overlay tar = %v, want %s", got, want)
	}
}

func TestNodeEndpointsRefuse(t *testing.T) {
	ts, n := nodeServer(t, false)
	for _, tt := range []struct{ method, path string }{{"GET", "/api/v1/node/overlay"}, {"POST", "/api/v1/node/hardware"}, {"POST", "/api/v1/node/power"}} {
		t.Run(tt.path, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader("{}"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), "secret") {
				t.Fatalf("%s = %d %q, want 403 and nothing secret", tt.path, resp.StatusCode, body)
			}
		})
	}
	if n.reported != nil {
		t.Fatal("a refused report was recorded")
	}
}

func TestHardwareReport(t *testing.T) {
	ts, n := nodeServer(t, true)
	resp, err := http.Post(ts.URL+"/api/v1/node/hardware", "application/json", strings.NewReader(`{"slurmd_c":"NodeName=c1 CPUs=8"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(n.reported), "CPUs=8") {
		t.Fatalf("status %d, reported %q", resp.StatusCode, n.reported)
	}
}

func TestPowerRequest(t *testing.T) {
	ts, _ := nodeServer(t, true)
	for _, tt := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"carried out", `{"action":"off","nodes":"c1"}`, 200, "c1 ipmi ok switched off\n"},
		{"malformed", `{}`, 400, "no action"},
		{"too large", `{"action":"off","nodes":"` + strings.Repeat("c1,", 10000) + `"}`, 413, "too large"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(ts.URL+"/api/v1/node/power", "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.want) {
				t.Fatalf("%d %q, want %d with %q", resp.StatusCode, body, tt.status, tt.want)
			}
		})
	}
}
