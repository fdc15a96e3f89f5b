package httpd

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"mime/multipart"
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
	keys     *TPMKeys // the TPM keys of the last overlay request
	token    string   // the token of the last hello or report
}

func (f *fakeNodes) Overlay(from netip.AddrPort, keys *TPMKeys) (Overlay, error) {
	if !f.allow {
		return Overlay{}, fmt.Errorf("%s is not c1: %w", from, ErrForbidden)
	}
	f.keys = keys
	o := Overlay{Node: "c1", Files: []OverlayFile{
		{Path: "/etc/hostname", Mode: 0o644, Data: []byte("c1\n")},
		{Path: "/etc/munge/munge.key", Mode: 0o400, UID: 900, GID: 900, Data: []byte("secret")},
	}}
	if keys != nil {
		o.Sealed = &Sealed{Credential: []byte("cred:" + string(keys.AK)), Payload: []byte("sealed"), EK: "ekfp"}
	}
	return o, nil
}

func (f *fakeNodes) Hello(from netip.AddrPort, token string) (Target, error) {
	if !f.allow {
		return Target{}, ErrForbidden
	}
	f.token = token
	return Target{Name: "c1", Role: "compute", Address: from.Addr()}, nil
}

func (f *fakeNodes) ReportHardware(from netip.AddrPort, token string, report []byte) (string, bool, error) {
	if !f.allow {
		return "", false, ErrForbidden
	}
	changed := string(f.reported) != string(report)
	f.reported, f.token = report, token
	return "c1", changed, nil
}

func (f *fakeNodes) Kickstart(from netip.Addr) (string, io.ReadCloser, error) {
	if !f.allow {
		return "", nil, ErrForbidden
	}
	return "c1", io.NopCloser(strings.NewReader("network --hostname=c1\n")), nil
}

func (f *fakeNodes) Power(_ context.Context, from netip.AddrPort, token string, request []byte) (string, []byte, error) {
	if !f.allow {
		return "", nil, fmt.Errorf("%s is not the master: %w", from, ErrForbidden)
	}
	f.token = token
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
	for _, tt := range []struct{ method, path string }{{"GET", "/api/v1/node/overlay"}, {"POST", "/api/v1/node/hardware"}, {"POST", "/api/v1/node/power"}, {"GET", "/api/v1/hello"}} {
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

// A node shows its token with its reports: the endpoint hands it to Nodes.
func TestReportsCarryTheToken(t *testing.T) {
	ts, n := nodeServer(t, true)
	for _, tt := range []struct {
		name, method, path, auth, want string
	}{
		{"hello with a token", "GET", "/api/v1/hello", "Bearer abc123", "abc123"},
		{"hello without", "GET", "/api/v1/hello", "", ""},
		{"hello with another scheme", "GET", "/api/v1/hello", "Basic abc123", ""},
		{"report with a token", "POST", "/api/v1/node/hardware", "Bearer def456", "def456"},
		{"power request with a token", "POST", "/api/v1/node/power", "Bearer 789abc", "789abc"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n.token = "unset"
			req, _ := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader(`{"action":"on"}`))
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || n.token != tt.want {
				t.Fatalf("%s %s: %d %q, token %q; want 200 and token %q", tt.method, tt.path, resp.StatusCode, body, n.token, tt.want)
			}
			if tt.path == "/api/v1/hello" && !strings.HasPrefix(string(body), "c1 compute 127.0.0.1") {
				t.Fatalf("hello answered %q", body)
			}
		})
	}
}

// tpmForm is the multipart form bootd-node posts with curl -F.
func tpmForm(t *testing.T, fields map[string]string) (string, *bytes.Buffer) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, name := range []string{"ek", "ak", "other"} {
		if v, ok := fields[name]; ok {
			fw, err := mw.CreateFormFile(name, name+".pub")
			if err != nil {
				t.Fatal(err)
			}
			fw.Write([]byte(v))
		}
	}
	mw.Close()
	return mw.FormDataContentType(), &b
}

// A POST with the node's TPM keys hands them to Nodes and answers with the sealed overlay: a
// plain tar of the credential and the encrypted payload, nothing else.
func TestSealedOverlay(t *testing.T) {
	ts, n := nodeServer(t, true)
	ctype, body := tpmForm(t, map[string]string{"ek": "EK", "ak": "AK"})
	resp, err := http.Post(ts.URL+"/api/v1/node/overlay", ctype, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-tar" {
		t.Fatalf("status %d, type %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if n.keys == nil || string(n.keys.EK) != "EK" || string(n.keys.AK) != "AK" {
		t.Fatalf("Nodes got keys %+v", n.keys)
	}
	tr := tar.NewReader(resp.Body)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got = append(got, fmt.Sprintf("%s %o %s", h.Name, h.Mode, data))
	}
	if want := "credential 600 cred:AK,overlay.tar.gz.enc 600 sealed"; strings.Join(got, ",") != want {
		t.Fatalf("sealed overlay %q, want %q", strings.Join(got, ","), want)
	}
}

// Malformed TPM keys are a 400, and Nodes is not asked.
func TestSealedOverlayBadForm(t *testing.T) {
	ts, n := nodeServer(t, true)
	for _, tt := range []struct {
		name   string
		fields map[string]string
		raw    string
	}{
		{"no ak", map[string]string{"ek": "EK"}, ""},
		{"empty ek", map[string]string{"ek": "", "ak": "AK"}, ""},
		{"unknown field", map[string]string{"ek": "EK", "ak": "AK", "other": "x"}, ""},
		{"not multipart", nil, "ek=EK&ak=AK"},
		{"too large", map[string]string{"ek": strings.Repeat("E", maxTPMKeys), "ak": "AK"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n.keys = nil
			ctype, body := tpmForm(t, tt.fields)
			if tt.raw != "" {
				ctype, body = "application/x-www-form-urlencoded", bytes.NewBufferString(tt.raw)
			}
			resp, err := http.Post(ts.URL+"/api/v1/node/overlay", ctype, body)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || n.keys != nil {
				t.Fatalf("status %d, Nodes got %+v; want 400 and nothing asked", resp.StatusCode, n.keys)
			}
		})
	}
}
