package labview

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/golden"
)

var taken = time.Date(2026, 11, 21, 12, 0, 40, 0, time.UTC)

// fixed is a lab with a node in each state, two machines waiting (one gone silent) and a role
// whose image does not verify.
type fixed struct{ lab Lab }

func (f fixed) Lab() Lab { return f.lab }

func sampleLab() Lab {
	ago := func(d time.Duration) time.Time { return taken.Add(-d) }
	waiting := []Machine{
		{MAC: "52:54:00:12:34:56", Vendor: "QEMU Standard PC (i440FX + PIIX, 1996)", Firmware: "pcbios/i386", Address: netip.MustParseAddr("10.80.0.201"),
			FirstSeen: ago(40 * time.Second), LastSeen: ago(time.Second)},
		{MAC: "52:54:00:ab:cd:ef", Vendor: `<script>alert("x")</script>`, Serial: "SN & 1", Firmware: "efi/x86_64",
			FirstSeen: ago(10 * time.Minute), LastSeen: ago(5 * time.Minute)},
	}
	names := NextNames([]string{"master", "c1", "c2"}, "master", "c", 99, len(waiting))
	for i := range waiting {
		waiting[i].Stands = Stands(waiting[i], taken)
		waiting[i].Command = AssignCommand(names[i], waiting[i].MAC)
	}
	return Lab{
		Taken:  taken,
		Server: Server{Interface: "eth1", Address: netip.MustParseAddr("10.80.0.1"), Started: ago(time.Hour)},
		Nodes: []Node{
			{Name: "master", Role: "master", MAC: "52:54:00:00:00:01", Address: netip.MustParseAddr("10.80.0.100"), State: "ready",
				Stage: "reported its hardware", StageAt: ago(3 * time.Minute), Image: "master", Version: "2026.11.21-1",
				Hardware: &Hardware{CPUs: 8, MemoryMiB: 15866}, LastSeen: ago(4 * time.Second), Power: "on"},
			{Name: "c1", Role: "compute", MAC: "52:54:00:00:00:03", Address: netip.MustParseAddr("10.80.0.101"), State: "ready",
				Image: "compute", Version: "2026.11.21-1", Hardware: &Hardware{CPUs: 16, MemoryMiB: 64000, GPUs: 2, GPUType: "rtx3090"}, LastSeen: ago(2 * time.Second)},
			{Name: "c2", Role: "compute", MAC: "52:54:00:00:00:04", Address: netip.MustParseAddr("10.80.0.102"), State: "booting",
				Stage: "fetching rootfs.squashfs", StageAt: ago(8 * time.Second), Image: "compute", Version: "2026.11.21-1", LastSeen: ago(8 * time.Second)},
			{Name: "c3", Role: "compute", MAC: "52:54:00:00:00:05", Address: netip.MustParseAddr("10.80.0.103"), State: "assigned"},
		},
		Waiting: waiting,
		Images: []RoleImage{
			{Role: "master", Image: "master", Version: "2026.11.21-1", Nodes: 1},
			{Role: "compute", Image: "compute", Problem: "no version of image compute verifies in /var/lib/bootd/images", Nodes: 3},
		},
	}
}

func serve(t *testing.T, src Source) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	for pattern, h := range Routes(src) {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestViews(t *testing.T) {
	t.Setenv("TZ", "UTC")
	srv := serve(t, fixed{sampleLab()})
	tests := []struct {
		name, path, golden, contentType string
	}{
		{"the page", "/", "page.html", "text/html; charset=utf-8"},
		{"its live part", "/?part=lab", "lab.html", "text/html; charset=utf-8"},
		{"its JSON", "/api/v1/lab", "lab.json", "application/json"},
		{"service discovery", "/api/v1/sd", "sd.json", "application/json"},
		{"service discovery at another port", "/api/v1/sd?port=9400", "sd-9400.json", "application/json"},
		{"its script", "/ui/lab.js", "", "text/javascript; charset=utf-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := get(t, srv.URL+tt.path)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tt.contentType {
				t.Fatalf("%s: %d %s, want 200 %s", tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), tt.contentType)
			}
			if tt.golden != "" {
				golden.Check(t, filepath.Join("testdata", tt.golden), []byte(body))
			}
			if strings.HasPrefix(tt.contentType, "text/") && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Errorf("no content security policy: %v", resp.Header)
			}
		})
	}
}

// TestFactsAreEscaped: a machine's facts come from its firmware, which anyone on the segment
// controls; the page must show them as text.
func TestFactsAreEscaped(t *testing.T) {
	srv := serve(t, fixed{sampleLab()})
	_, body := get(t, srv.URL+"/?part=lab")
	if strings.Contains(body, "<script>alert") || !strings.Contains(body, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;") {
		t.Errorf("a vendor string with markup was not escaped:\n%s", body)
	}
}

func TestSDPort(t *testing.T) {
	srv := serve(t, fixed{sampleLab()})
	for _, bad := range []string{"0", "65536", "x", "-1"} {
		if resp, _ := get(t, srv.URL+"/api/v1/sd?port="+bad); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("port=%s: %d, want 400", bad, resp.StatusCode)
		}
	}
}

func TestEmptyLabJSON(t *testing.T) {
	srv := serve(t, fixed{Lab{Taken: taken}})
	_, body := get(t, srv.URL+"/api/v1/lab")
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"nodes", "waiting", "images"} {
		if string(raw[k]) != "[]" {
			t.Errorf("%s = %s, want []", k, raw[k])
		}
	}
	_, body = get(t, srv.URL+"/api/v1/sd")
	if strings.TrimSpace(body) != "[]" {
		t.Errorf("service discovery of an empty lab = %s, want []", body)
	}
}

func TestNextNames(t *testing.T) {
	tests := []struct {
		taken []string
		n     int
		want  string
	}{
		{nil, 2, "master c1"},
		{[]string{"master", "c1", "c3"}, 3, "c2 c4"}, // max_nodes 4
		{[]string{"c1"}, 1, "master"},
		{[]string{"master", "c1", "c2"}, 0, ""},
	}
	for _, tt := range tests {
		if got := strings.Join(NextNames(tt.taken, "master", "c", 4, tt.n), " "); got != tt.want {
			t.Errorf("NextNames(%v, %d) = %q, want %q", tt.taken, tt.n, got, tt.want)
		}
	}
	if got := NextNames([]string{"master", "c1", "c2"}, "master", "c", 2, 1); len(got) != 0 {
		t.Errorf("names past max_nodes: %v", got)
	}
}
