package httpd

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/golden"
	"github.com/sirupsen/logrus"
)

const (
	waitingMAC  = "52:54:00:00:00:01"
	assignedMAC = "52:54:00:00:00:04"
)

// fakeMachines knows one assigned node (c4) and treats every other MAC as waiting.
type fakeMachines struct {
	seen  []Facts
	image string // dir holding the fake image files
}

func (f *fakeMachines) target() Target {
	mac, _ := net.ParseMAC(assignedMAC)
	return Target{Name: "c4", Role: "compute", Address: netip.MustParseAddr("10.80.0.104"), MAC: mac,
		Image: "compute", Version: "2026.11.21-1", Kernel: "vmlinuz", Initrds: []string{"initramfs.img"}, Cmdline: "console=ttyS0 quiet",
		Rootfs: "rootfs.squashfs", RootfsSHA256: strings.Repeat("ab", 32),
		WritableArgs: []string{"rd.bootd.ram=50%", "rd.bootd.disk=scratch:scratch:serial=S4EW,minsize=214748364800"}}
}

func (f *fakeMachines) Boot(mac net.HardwareAddr, from netip.Addr, facts Facts) (Target, bool, error) {
	if mac.String() == "52:54:00:00:00:66" {
		return Target{}, false, fmt.Errorf("request from %s: %w", from, ErrForbidden)
	}
	f.seen = append(f.seen, facts)
	if mac.String() == assignedMAC {
		return f.target(), true, nil
	}
	return Target{}, false, nil
}

func (f *fakeMachines) Inventory() any { return map[string]int{"nodes": 1} }

// fakeFiles serves files from a directory and fails the test if it is asked for a path.
type fakeFiles struct {
	t   *testing.T
	dir string
}

func (f fakeFiles) check(name string) error {
	if name == "" || strings.ContainsAny(name, "/\\") || name == ".." || name == "." {
		f.t.Errorf("Files asked for unsafe name %q", name)
	}
	if name != "vmlinuz" && name != "initramfs.img" && name != "ipxe.efi" {
		return fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	return nil
}

func (f fakeFiles) OpenImageFile(image, version, file string) (*os.File, error) {
	for _, n := range []string{image, version} {
		if strings.ContainsAny(n, "/\\") || n == ".." {
			f.t.Errorf("Files asked for unsafe element %q", n)
		}
	}
	if err := f.check(file); err != nil {
		return nil, err
	}
	return os.Open(filepath.Join(f.dir, file))
}

func (f fakeFiles) OpenChunk(prefix, name string) (*os.File, error) {
	for _, n := range []string{prefix, name} {
		if err := f.check(n); err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
	}
	if len(name) != 64 || prefix != name[:4] {
		return nil, fmt.Errorf("chunk %s/%s: %w", prefix, name, ErrNotFound)
	}
	fh, err := os.Open(filepath.Join(f.dir, "chunks", prefix, name))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return fh, nil
}

func (f fakeFiles) OpenFetchInitrd() (*os.File, error) {
	return os.Open(filepath.Join(f.dir, "bootd-fetch.img"))
}

func (f fakeFiles) OpenLoader(name string) (*os.File, error) {
	if err := f.check(name); err != nil {
		return nil, err
	}
	return os.Open(filepath.Join(f.dir, name))
}

func newTestServer(t *testing.T) (*httptest.Server, *fakeMachines) {
	t.Helper()
	dir := t.TempDir()
	for name, size := range map[string]int{"vmlinuz": 1000, "initramfs.img": 5000, "ipxe.efi": 300} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Repeat(name[:1], size)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := &fakeMachines{}
	log := logrus.New()
	log.SetOutput(io.Discard)
	s := New(Options{BaseURL: "http://10.80.0.1", Netmask: netip.MustParseAddr("255.255.255.0"), Gateway: netip.MustParseAddr("10.80.0.254"), DNS: []netip.Addr{netip.MustParseAddr("10.80.0.1"), netip.MustParseAddr("10.80.0.2")}, PollInterval: 3 * time.Second}, m, fakeFiles{t, dir}, nil, log)
	ts := httptest.NewServer(s.Handler()) // real loopback socket
	t.Cleanup(ts.Close)
	return ts, m
}

func get(t *testing.T, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestScripts(t *testing.T) {
	ts, _ := newTestServer(t)
	tests := []struct{ name, path, golden string }{
		{"chain to the machine script", "/boot.ipxe", "boot.ipxe"},
		{"unknown machine waits", "/ipxe/machine?mac=52-54-00-00-00-01&manufacturer=QEMU&product=Standard%20PC&serial=SN%24%7Bx%7D", "discovery.ipxe"},
		{"poll while waiting fails", "/ipxe/machine?mac=52-54-00-00-00-01&poll=1", "poll-waiting.ipxe"},
		{"assigned machine boots its role", "/ipxe/machine?mac=52-54-00-00-00-04", "target.ipxe"},
		{"assigned machine polling boots too", "/ipxe/machine?mac=52-54-00-00-00-04&poll=1", "target.ipxe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := get(t, ts.URL+tt.path)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			golden.Check(t, filepath.Join("testdata", tt.golden), []byte(body))
		})
	}
}

func TestFactsArePrintable(t *testing.T) {
	ts, m := newTestServer(t)
	get(t, ts.URL+"/ipxe/machine?mac=52-54-00-00-00-01&serial=%1b%5b2J%24%7Bx%7DS1&product="+strings.Repeat("x", 300))
	if len(m.seen) != 1 || m.seen[0].Serial != "[2J{x}S1" || len(m.seen[0].Product) != maxFact {
		t.Fatalf("facts = %+v, want escapes and $ stripped, length capped", m.seen)
	}
}

func TestFactsAreRecorded(t *testing.T) {
	ts, m := newTestServer(t)
	get(t, ts.URL+"/ipxe/machine?mac=52-54-00-00-00-01&uuid=u-1&serial=S1&manufacturer=Acme&product=Standard%20PC%20(i440FX%20+%20PIIX)&arch=x86_64&platform=efi")
	want := Facts{UUID: "u-1", Serial: "S1", Manufacturer: "Acme", Product: "Standard PC (i440FX + PIIX)", Arch: "x86_64", Platform: "efi"}
	if len(m.seen) != 1 || m.seen[0] != want {
		t.Fatalf("facts = %+v, want %+v", m.seen, want)
	}
}

func TestRequests(t *testing.T) {
	ts, _ := newTestServer(t)
	tests := []struct {
		name       string
		path       string
		header     []string
		wantStatus int
		wantBody   string // prefix
	}{
		{"kernel", "/images/compute/2026.11.21-1/vmlinuz", nil, 200, "vvvv"},
		{"range", "/images/compute/2026.11.21-1/initramfs.img", []string{"Range", "bytes=10-19"}, 206, "iiiiiiiiii"},
		{"loader for UEFI HTTP boot", "/ipxe/ipxe.efi", nil, 200, "iii"},
		{"unlisted file", "/images/compute/2026.11.21-1/manifest.json", nil, 404, ""},
		{"traversal dot-dot", "/images/compute/../../../etc/passwd", nil, 404, ""},
		{"traversal encoded", "/images/compute/2026.11.21-1/..%2f..%2fetc%2fpasswd", nil, 404, ""},
		{"traversal in loader", "/ipxe/..%2F..%2Fetc%2Fshadow", nil, 404, ""},
		{"machine without mac", "/ipxe/machine", nil, 400, ""},
		{"machine with bad mac", "/ipxe/machine?mac=zz", nil, 400, ""},
		{"machine asking from the wrong address", "/ipxe/machine?mac=52-54-00-00-00-66", nil, 403, ""},
		{"api nodes", "/api/v1/nodes", nil, 200, "{"},
		{"healthz", "/healthz", nil, 200, "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := get(t, ts.URL+tt.path, tt.header...)
			if resp.StatusCode != tt.wantStatus || !strings.HasPrefix(body, tt.wantBody) {
				t.Fatalf("GET %s = %d %q, want %d %q...", tt.path, resp.StatusCode, body, tt.wantStatus, tt.wantBody)
			}
			if tt.wantStatus == 200 && strings.HasPrefix(tt.path, "/images/") && resp.ContentLength <= 0 {
				t.Errorf("no Content-Length on %s", tt.path)
			}
		})
	}
}

func TestUnsafeImageRefused(t *testing.T) {
	s := New(Options{BaseURL: "http://10.80.0.1", Netmask: netip.MustParseAddr("255.255.255.0")}, nil, nil, nil, logrus.New())
	mac, _ := net.ParseMAC(assignedMAC)
	for _, cmdline := range []string{"root=${evil}", "a\nshell", "x\x00y"} {
		t.Run(fmt.Sprintf("%q", cmdline), func(t *testing.T) {
			_, err := s.targetView(Target{Name: "c4", MAC: mac, Address: netip.MustParseAddr("10.80.0.104"), Image: "compute", Version: "1", Kernel: "vmlinuz", Cmdline: cmdline})
			if err == nil {
				t.Fatal("unsafe cmdline accepted into an iPXE script")
			}
		})
	}
}

// TestRootImageWithoutHashRefused: bootd never renders a live root without rd.bootd.sha256=,
// which the node's bootd-verify would boot unchecked.
func TestRootImageWithoutHashRefused(t *testing.T) {
	s := New(Options{BaseURL: "http://10.80.0.1", Netmask: netip.MustParseAddr("255.255.255.0")}, nil, nil, nil, logrus.New())
	tgt := (&fakeMachines{}).target()
	for _, sum := range []string{"", "abc", strings.Repeat("AB", 32), strings.Repeat("ab", 32) + " rd.shell=1"} {
		t.Run(fmt.Sprintf("%q", sum), func(t *testing.T) {
			tgt.RootfsSHA256 = sum
			if _, err := s.targetView(tgt); err == nil || !strings.Contains(err.Error(), "no sha256") {
				t.Fatalf("root image with sha256 %q: err %v, want a refusal", sum, err)
			}
		})
	}
}

// TestTargetArgsStopAFailedBoot: every node's kernel command line tells dracut to halt, without
// a shell, when the boot fails (a refused root image among others), and a live root carries
// its hash.
func TestTargetArgsStopAFailedBoot(t *testing.T) {
	s := New(Options{BaseURL: "http://10.80.0.1", Netmask: netip.MustParseAddr("255.255.255.0")}, nil, nil, nil, logrus.New())
	live := (&fakeMachines{}).target()
	disk := live
	disk.Rootfs, disk.RootfsSHA256 = "", ""
	for name, tgt := range map[string]Target{"live root": live, "no live root": disk} {
		t.Run(name, func(t *testing.T) {
			v, err := s.targetView(tgt)
			if err != nil {
				t.Fatal(err)
			}
			args := " " + v.Args + " "
			for _, want := range []string{" rd.shell=0 ", " rd.emergency=halt "} {
				if !strings.Contains(args, want) {
					t.Errorf("kernel command line %q lacks %q", v.Args, want)
				}
			}
			if hash := " rd.bootd.sha256=" + tgt.RootfsSHA256 + " "; (tgt.Rootfs != "") != strings.Contains(args, hash) {
				t.Errorf("kernel command line %q: live root %v, hash %q", v.Args, tgt.Rootfs != "", hash)
			}
			// The image's own arguments come last: an image built for debugging may turn the shell back on.
			if !strings.HasSuffix(v.Args, " "+tgt.Cmdline) {
				t.Errorf("kernel command line %q does not end with the image's %q", v.Args, tgt.Cmdline)
			}
		})
	}
}

// FuzzRequestPath sends arbitrary paths through the router: the Files backend (the check in
// fakeFiles) must never be asked for a name that leaves its directory.
func FuzzRequestPath(f *testing.F) {
	for _, seed := range []string{"/images/a/b/c", "/images/../../etc/passwd", "/ipxe/..%2f..", "/images/a/b/%2e%2e", "/ipxe/ipxe.efi", "//images//a/b/c"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, path string) {
		dir := t.TempDir()
		log := logrus.New()
		log.SetOutput(io.Discard)
		s := New(Options{BaseURL: "http://x"}, &fakeMachines{}, fakeFiles{t, dir}, nil, log)
		req, err := http.NewRequest(http.MethodGet, "http://x", nil)
		if err != nil {
			return
		}
		req.URL.Path, req.URL.RawPath = path, ""
		if u, err := req.URL.Parse(path); err == nil {
			req.URL = u
		}
		s.Handler().ServeHTTP(httptest.NewRecorder(), req)
	})
}
