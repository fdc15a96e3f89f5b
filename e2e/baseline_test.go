//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// bootLimit bounds one VM boot, from power on to power off, under TCG.
const bootLimit = 5 * time.Minute

// TestBaselineDnsmasq proves the virtual lab with dnsmasq as DHCP + TFTP
// server and logs the boot times bootd is later compared with: a BIOS PC
// (e1000, iPXE option ROM) and a UEFI PC (OVMF native PXE -> ipxe.efi),
// both reaching their reserved static address from the kernel command line.
func TestBaselineDnsmasq(t *testing.T) {
	requirePrereqs(t, "qemu-system-x86_64", "dnsmasq", "ip")
	requireFiles(t, vlab.OVMFPath, filepath.Join(vlab.IPXEDir, "ipxe.efi"), filepath.Join(vlab.IPXEDir, "undionly.kpxe"))
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()

	lab := newLab(ctx, t, "baseline", "10.80.0.1/24")

	dir := artifactDir(t)
	imageDir := filepath.Join(dir, "image")
	release, err := vlab.BuildTestImage(imageDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("test image: kernel %s", release)

	pcs := []struct {
		spec vlab.VMSpec
		addr netip.Addr
		// firmware: console line showing which firmware started the
		// network boot. fetched: iPXE binaries the firmware must fetch
		// over TFTP; absent: ones it must not. Together they prove the
		// boot path.
		firmware        string
		fetched, absent []string
	}{
		{
			// The e1000 option ROM is iPXE: straight to boot.ipxe.
			spec:     vlab.VMSpec{Name: "pc-bios", MAC: mustMAC("52:54:00:80:00:0a"), Firmware: vlab.BIOS},
			addr:     netip.MustParseAddr("10.80.0.10"),
			firmware: "iPXE (PCI 00:03.0) starting execution",
			absent:   []string{"undionly.kpxe", "ipxe.efi"},
		},
		{
			// OVMF's own PXE (option 93 = 7) fetches ipxe.efi first.
			spec:     vlab.VMSpec{Name: "pc-uefi", MAC: mustMAC("52:54:00:80:00:0b"), Firmware: vlab.UEFI, MemoryMiB: 1024},
			addr:     netip.MustParseAddr("10.80.0.11"),
			firmware: ">>Start PXE over IPv4",
			fetched:  []string{"ipxe.efi"},
			absent:   []string{"undionly.kpxe"},
		},
	}
	var hosts []vlab.DnsmasqHost
	for _, pc := range pcs {
		hosts = append(hosts, vlab.DnsmasqHost{MAC: pc.spec.MAC, Addr: pc.addr, Hostname: pc.spec.Name})
	}
	helloURL := startHello(ctx, t, lab, dir)
	dns, err := lab.StartDnsmasq(ctx, dir, vlab.DnsmasqOptions{ImageDir: imageDir, Hosts: hosts, ExtraCmdline: "bootd=" + helloURL})
	if err != nil {
		t.Fatal(err)
	}
	defer logTailOnFailure(t, dns.LogPath)

	// Sequential on purpose: two cores, and each boot is timed alone.
	for _, pc := range pcs {
		t.Run(pc.spec.Firmware.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, bootLimit)
			defer cancel()
			vm, err := lab.StartVM(ctx, pc.spec, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer vm.Kill()
			t.Logf("qemu-system-x86_64 %s", strings.Join(vm.Args, " "))

			m, err := vm.WaitConsole(ctx, regexp.MustCompile(`VLAB-IP: (\S+) (\S+)/(\d+)`))
			if err != nil {
				t.Fatal(err)
			}
			d := time.Since(vm.Started).Round(100 * time.Millisecond)
			if m[2] != pc.addr.String() || m[3] != "24" {
				t.Errorf("VLAB-IP %s/%s, want %s/24", m[2], m[3], pc.addr)
			}
			h, err := vm.WaitConsole(ctx, regexp.MustCompile(`VLAB-HOSTNAME: (\S+)`))
			if err != nil {
				t.Fatal(err)
			}
			if h[1] != pc.spec.Name {
				t.Errorf("VLAB-HOSTNAME %s, want %s", h[1], pc.spec.Name)
			}
			hello, err := vm.WaitConsole(ctx, regexp.MustCompile(`VLAB-HELLO(-FAILED|: .*)`))
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(hello[1]) != ": "+helloBody {
				t.Errorf("console %q, want VLAB-HELLO: %s", hello[0], helloBody)
			}
			if _, err := vm.WaitConsole(ctx, regexp.MustCompile(`VLAB-DONE`)); err != nil {
				t.Fatal(err)
			}
			if err := vm.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(vm.Console(), pc.firmware) {
				t.Errorf("console lacks %q: not the intended boot path", pc.firmware)
			}
			checkTFTP(t, dns.LogPath, pc.fetched, pc.absent)
			t.Logf("baseline dnsmasq %s boot: %s (VM start to VLAB-IP on %s)", strings.ToUpper(pc.spec.Firmware.String()), d, m[1])
			recordBoot("dnsmasq", strings.ToUpper(pc.spec.Firmware.String()), d)
		})
	}
}

// helloBody is what the stand-in for bootd's hello endpoint answers.
const helloBody = "hello-from-vlab"

// startHello serves /api/v1/hello with busybox httpd on the bridge, a
// stand-in for bootd that proves the image's bootd= report path, and returns
// the base URL for the kernel command line.
func startHello(ctx context.Context, t *testing.T, lab *vlab.Lab, dir string) string {
	t.Helper()
	www := filepath.Join(dir, "www")
	if err := os.MkdirAll(filepath.Join(www, "api", "v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(www, "api", "v1", "hello"), []byte(helloBody+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("%s:8080", lab.Addr.Addr())
	if _, err := lab.Start(ctx, filepath.Join(dir, "httpd.log"), "busybox", "httpd", "-f", "-p", addr, "-h", www); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

// requirePrereqs fails (never skips: CI has all of them) when the test
// cannot build a lab here.
func requirePrereqs(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("e2e tests need root (network namespaces, tap devices)")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("e2e tests need %s: %v (scripts/setup-debian.sh installs every tool they use)", tool, err)
		}
	}
}

// requireFiles fails when firmware files the lab serves or boots are missing.
func requireFiles(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("e2e tests need %s: %v (apt-get install ovmf ipxe)", p, err)
		}
	}
}

// checkTFTP checks which firmware-level boot files dnsmasq sent. Only the
// iPXE binaries are checked: they are what tells the boot paths apart.
func checkTFTP(t *testing.T, logPath string, fetched, absent []string) {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	for _, f := range fetched {
		if !strings.Contains(log, "/"+f+" to ") {
			t.Errorf("dnsmasq never sent %s over TFTP", f)
		}
	}
	for _, f := range absent {
		if strings.Contains(log, "/"+f+" to ") {
			t.Errorf("dnsmasq sent %s over TFTP, want it never fetched", f)
		}
	}
}

func logTailOnFailure(t *testing.T, path string) {
	if !t.Failed() {
		return
	}
	t.Logf("%s (tail):\n%s", path, vlab.TailFile(path, 60))
}

// artifactDir is where consoles and logs go: $VLAB_ARTIFACTS/<test> when
// set (kept for CI to upload), else a temporary directory.
func artifactDir(t *testing.T) string {
	base := os.Getenv("VLAB_ARTIFACTS")
	if base == "" {
		return t.TempDir()
	}
	dir := filepath.Join(base, t.Name())
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}
