//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// TestBootd is scenario 1 of the product, for real: PCs netboot through bootd in a virtual lab,
// wait to be named, are assigned, boot on without a power cycle with their static address and
// hostname, report to bootd from that address, and boot straight into their role next time.
func TestBootd(t *testing.T) {
	requirePrereqs(t, "qemu-system-x86_64", "ip", "go")
	requireFiles(t, vlab.OVMFPath, filepath.Join(vlab.IPXEDir, "ipxe.efi"), filepath.Join(vlab.IPXEDir, "undionly.kpxe"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dir := artifactDir(t)
	lab := newLab(ctx, t, "bootd", "10.80.0.1/24")
	b := startBootd(ctx, t, lab, dir)
	defer logTailOnFailure(t, b.Proc.LogPath)

	s := &scenario{lab: lab, b: b, dir: dir}
	t.Run("bios/assign c4 while waiting, after a forged RELEASE", func(t *testing.T) {
		s.discoverAssignBoot(ctx, t, pc("bios-c4", "52:54:00:e2:e0:04", vlab.BIOS), "c4", "compute", "10.80.0.104", false, true)
	})
	t.Run("bios/reboot goes straight to c4", func(t *testing.T) {
		d := s.bootAssigned(ctx, t, pc("bios-c4-again", "52:54:00:e2:e0:04", vlab.BIOS), "c4", "compute", "10.80.0.104")
		recordBoot("bootd", "BIOS", d)
	})
	t.Run("uefi/assign master with --mac", func(t *testing.T) {
		s.discoverAssignBoot(ctx, t, pc("uefi-master", "52:54:00:e2:e0:01", vlab.UEFI), "master", "master", "10.80.0.100", true, false)
		if !strings.Contains(b.LogTail(400), `file=ipxe.efi`) {
			t.Error("bootd never sent ipxe.efi over TFTP: the UEFI VM did not take the firmware PXE path")
		}
	})
	t.Run("uefi/reboot goes straight to master", func(t *testing.T) {
		d := s.bootAssigned(ctx, t, pc("uefi-master-again", "52:54:00:e2:e0:01", vlab.UEFI), "master", "master", "10.80.0.100")
		recordBoot("bootd", "UEFI", d)
	})
	t.Run("two waiting/assign without --mac lists both", func(t *testing.T) {
		s.twoWaiting(ctx, t)
	})
	t.Run("inventory/states and facts", func(t *testing.T) {
		s.checkInventory(ctx, t)
	})
	t.Run("uefi/secure boot: listed with what to do", func(t *testing.T) {
		s.secureBoot(ctx, t)
	})
	t.Run("appliance/strict reverse-path filtering seen", func(t *testing.T) {
		// The lab's bridge has rp_filter 1 (vlab.New): bootd reads its namespace's /proc/sys.
		log, err := os.ReadFile(b.Proc.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "reverse-path filtering on the lab interface is strict") {
			t.Errorf("bootd's log, want it to see strict reverse-path filtering:\n%s", log)
		}
	})
}

// secureBoot powers on a UEFI PC with Secure Boot on (Microsoft's keys, as shipped PCs have):
// it fetches ipxe.efi and refuses to run it, its firmware tries its next boot option (UEFI HTTP
// boot, which bootd answers with snponly.efi, the fallback), refuses that too, and stops. bootd
// nodes lists it among the PCs whose iPXE never started, with the Secure Boot advice.
func (s *scenario) secureBoot(ctx context.Context, t *testing.T) {
	requireFiles(t, vlab.OVMFSecureBootCode, vlab.OVMFSecureBootVars)
	const mac = "52:54:00:e2:e0:5b"
	vm := s.startVM(ctx, t, pc("uefi-secureboot", mac, vlab.UEFISecureBoot))
	ctx, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		r, err := s.b.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range r.NotStarted {
			if p.MAC == mac && strings.Contains(p.Advice, "Secure Boot") {
				t.Logf("listed %s after power on: fetched %v, next %s: %s", time.Since(vm.Started).Round(time.Second), p.Fetched, p.Next, p.Advice)
				out, err := s.b.CLI(ctx, "nodes")
				if err != nil || !strings.Contains(out, mac+": Secure Boot is probably on") {
					t.Errorf("bootd nodes (%v):\n%s", err, out)
				}
				t.Logf("bootd nodes:\n%s", out)
				for _, l := range vm.ConsoleLines("Access Denied") {
					t.Logf("console: %s", strings.TrimSpace(l))
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("never listed with the Secure Boot advice: %v; last list %+v; console tail:\n%s", ctx.Err(), r.NotStarted, vm.ConsoleTail(30))
		case <-tick.C:
		}
	}
}

type scenario struct {
	lab *vlab.Lab
	b   *vlab.Bootd
	dir string
}

func pc(name, mac string, fw vlab.Firmware) vlab.VMSpec {
	return vlab.VMSpec{Name: name, MAC: mustMAC(mac), Firmware: fw}
}

// startBootd builds bootd, publishes the test image as "master" and "compute", and serves them.
func startBootd(ctx context.Context, t *testing.T, lab *vlab.Lab, dir string) *vlab.Bootd {
	t.Helper()
	bin := buildBootd(ctx, t, dir)
	if err := vlab.WriteTestImages(filepath.Join(dir, "images"), filepath.Join(dir, "stage"), "console=ttyS0", "master", "compute"); err != nil {
		t.Fatal(err)
	}
	b, err := lab.StartBootd(ctx, bin, dir, "--debug")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// discoverAssignBoot powers on an unknown PC, sees it wait, assigns it, and sees it boot on.
// With forgeRelease, a host on the segment first ends the waiting machine's lease (forgedRelease).
func (s *scenario) discoverAssignBoot(ctx context.Context, t *testing.T, spec vlab.VMSpec, name, role, addr string, withMAC, forgeRelease bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*bootLimit)
	defer cancel()
	vm := s.startVM(ctx, t, spec)
	if _, err := vm.WaitConsole(ctx, regexp.MustCompile(`waiting to be named`)); err != nil {
		t.Fatal(err)
	}
	if err := s.b.WaitWaiting(ctx, spec.MAC.String()); err != nil {
		t.Fatal(err)
	}
	if forgeRelease {
		s.forgedRelease(ctx, t, vm)
	}
	args := []string{"assign", name}
	if withMAC {
		args = append(args, "--mac", spec.MAC.String())
	}
	if out, err := s.b.CLI(ctx, args...); err != nil || !strings.Contains(out, "is "+name) {
		t.Fatalf("bootd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	s.checkBooted(ctx, t, vm, name, role, addr)
}

// bootAssigned powers on a PC that is already assigned: it must not wait, and it boots its role.
func (s *scenario) bootAssigned(ctx context.Context, t *testing.T, spec vlab.VMSpec, name, role, addr string) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, bootLimit)
	defer cancel()
	vm := s.startVM(ctx, t, spec)
	d := s.checkBooted(ctx, t, vm, name, role, addr)
	if strings.Contains(vm.Console(), "waiting to be named") {
		t.Error("an assigned machine was shown the discovery screen")
	}
	return d
}

func (s *scenario) startVM(ctx context.Context, t *testing.T, spec vlab.VMSpec) *vlab.VM {
	t.Helper()
	vm, err := s.lab.StartVM(ctx, spec, s.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Kill)
	return vm
}

// checkBooted waits for the test image's report: the kernel command line bootd gave, the static
// address and hostname it set from ip=, and bootd's answer to the hello sent from that address.
// It returns the time from power on to the address being up.
func (s *scenario) checkBooted(ctx context.Context, t *testing.T, vm *vlab.VM, name, role, addr string) time.Duration {
	t.Helper()
	cmd, err := vm.WaitConsole(ctx, regexp.MustCompile(`VLAB-CMDLINE: (.*)`))
	if err != nil {
		t.Fatal(err)
	}
	bootif := "BOOTIF=01-" + strings.ReplaceAll(vm.Spec.MAC.String(), ":", "-")
	for _, want := range []string{"ip=" + addr + "::", ":255.255.255.0:" + name + "::none", bootif, "bootd=http://10.80.0.1"} {
		if !strings.Contains(cmd[1], want) {
			t.Errorf("kernel command line %q lacks %q", cmd[1], want)
		}
	}
	ip, err := vm.WaitConsole(ctx, regexp.MustCompile(`VLAB-IP: \S+ (\S+)`))
	if err != nil {
		t.Fatal(err)
	}
	up := time.Since(vm.Started)
	if ip[1] != addr+"/24" {
		t.Errorf("node configured %s, want %s/24", ip[1], addr)
	}
	host, err := vm.WaitConsole(ctx, regexp.MustCompile(`VLAB-HOSTNAME: (\S+)`))
	if err != nil || host[1] != name {
		t.Errorf("hostname %v (%v), want %s", host, err, name)
	}
	hello, err := vm.WaitConsole(ctx, regexp.MustCompile(`VLAB-HELLO(-FAILED|: .*)`))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(": %s %s %s", name, role, addr); strings.TrimSpace(hello[1]) != want {
		t.Errorf("bootd answered the node's hello with %q, want %q", hello[1], want)
	}
	// The hardware report, from a privileged port: bootd then has the node ready.
	if rep, err := vm.WaitConsole(ctx, regexp.MustCompile(`VLAB-REPORT: (.*)`)); err != nil || !strings.Contains(rep[1], " 200 ") {
		t.Errorf("hardware report: %v (%v), want bootd's 200", rep, err)
	}
	if err := vm.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	return up.Round(100 * time.Millisecond)
}

// twoWaiting: with two machines waiting, assign without --mac must refuse and list both.
func (s *scenario) twoWaiting(ctx context.Context, t *testing.T) {
	ctx, cancel := context.WithTimeout(ctx, 2*bootLimit)
	defer cancel()
	specs := []vlab.VMSpec{pc("bios-a", "52:54:00:e2:e0:0a", vlab.BIOS), pc("bios-b", "52:54:00:e2:e0:0b", vlab.BIOS)}
	vms := []*vlab.VM{s.startVM(ctx, t, specs[0]), s.startVM(ctx, t, specs[1])}
	if err := s.b.WaitWaiting(ctx, specs[0].MAC.String(), specs[1].MAC.String()); err != nil {
		t.Fatal(err)
	}
	out, err := s.b.CLI(ctx, "assign", "c1")
	if err == nil {
		t.Fatalf("assign without --mac succeeded with two machines waiting:\n%s", out)
	}
	for _, want := range []string{specs[0].MAC.String(), specs[1].MAC.String(), "--mac"} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal does not mention %s:\n%s", want, out)
		}
	}
	for i, name := range []string{"c1", "c2"} {
		if out, err := s.b.CLI(ctx, "assign", name, "--mac", specs[i].MAC.String()); err != nil {
			t.Fatalf("assign %s: %v\n%s", name, err, out)
		}
	}
	s.checkBooted(ctx, t, vms[0], "c1", "compute", "10.80.0.101")
	s.checkBooted(ctx, t, vms[1], "c2", "compute", "10.80.0.102")
}

// checkInventory: every node is up with the facts iPXE reported, and nothing waits.
func (s *scenario) checkInventory(ctx context.Context, t *testing.T) {
	r, err := s.b.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range r.Nodes {
		names = append(names, n.Name)
		if n.State != inventory.StateReady || n.Hardware == nil || n.Facts.Manufacturer == "" || n.Facts.Platform == "" {
			t.Errorf("node %s: state %s, facts %+v; want ready (its hardware reported) with manufacturer and platform", n.Name, n.State, n.Facts)
		}
	}
	if want := []string{"c1", "c2", "c4", "master"}; !slices.Equal(names, want) {
		t.Errorf("nodes %v, want %v", names, want)
	}
	if len(r.Waiting) != 0 {
		t.Errorf("machines still waiting: %+v", r.Waiting)
	}
	out, err := s.b.CLI(ctx, "nodes")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bootd nodes:\n%s", out)
}

// forgedRelease: a host on the segment ends a waiting machine's discovery lease with a DHCPRELEASE
// carrying its MAC and address (both listed by /api/v1/nodes). bootd refuses the machine's next
// poll, which no longer comes from an address leased to it; the discovery script then asks DHCP
// again and polls from its new lease, so the machine still boots when it is assigned. (It used
// to be refused at every poll, even after bootd assign, until it was power-cycled.)
func (s *scenario) forgedRelease(ctx context.Context, t *testing.T, vm *vlab.VM) {
	t.Helper()
	mac := vm.Spec.MAC.String()
	lease, ok := s.leaseOf(ctx, t, mac)
	if !ok {
		t.Fatalf("machine %s waits without a discovery lease", mac)
	}
	seg := newSegClient(ctx, t, s.lab, "forger", "52:54:00:e2:e0:f0", netip.MustParsePrefix("10.80.0.250/24"))
	release, err := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease), dhcpv4.WithHwAddr(vm.Spec.MAC),
		dhcpv4.WithClientIP(lease.AsSlice()), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(s.lab.Addr.Addr().AsSlice())))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seg.conn.WriteTo(release.ToBytes(), &net.UDPAddr{IP: s.lab.Addr.Addr().AsSlice(), Port: dhcpv4.ServerPort}); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.WaitConsole(ctx, regexp.MustCompile(`poll refused or unanswered, asking DHCP for an address again`)); err != nil {
		t.Fatalf("the machine never asked DHCP again after its lease was released: %v", err)
	}
	if !slices.ContainsFunc(strings.Split(s.b.LogTail(400), "\n"), func(l string) bool {
		return strings.Contains(l, "refused a machine script request") && strings.Contains(l, mac)
	}) {
		t.Error("bootd did not refuse the released machine's poll: the forged RELEASE did not end its lease")
	}
	for {
		if _, ok := s.leaseOf(ctx, t, mac); ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the released machine never got a new discovery lease: %v", ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// leaseOf returns the discovery lease bootd holds for mac, if any.
func (s *scenario) leaseOf(ctx context.Context, t *testing.T, mac string) (netip.Addr, bool) {
	t.Helper()
	r, err := s.b.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range r.Leases {
		if l.MAC == mac && !l.Declined {
			return l.Address, true
		}
	}
	return netip.Addr{}, false
}
