//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// nodeBootMemoryMiB is the BIOS PC's memory: the kernel, the initramfs and the squashfs kept in
// a tmpfs all live in it.
const nodeBootMemoryMiB = 512

// nodeBootUEFIMemoryMiB is the UEFI PC's memory: OVMF's PXE boot wants about 1 GiB (vlab never
// gives a UEFI VM less).
const nodeBootUEFIMemoryMiB = 1024

// nodePC is one PC of the node boot: its firmware, its MAC, and the node it is assigned as.
type nodePC struct {
	fw        vlab.Firmware
	mac       string
	name      string // the node it is assigned as
	addr      string // the node's static address
	memoryMiB int
	tpm       bool // the PC has a TPM 2.0 (swtpm)
}

// nodeBootPCs are the PCs TestNodeBoot netboots, one per firmware: SeaBIOS whose e1000 ROM is
// iPXE (straight to HTTP), with a TPM; and OVMF on virtio-net (native PXE: ipxe.efi over TFTP,
// then HTTP), without one, as older PCs are.
var nodeBootPCs = []nodePC{
	{fw: vlab.BIOS, mac: "52:54:00:e2:b0:01", name: "c1", addr: "10.80.0.101", memoryMiB: nodeBootMemoryMiB, tpm: true},
	{fw: vlab.UEFI, mac: "52:54:00:e2:b0:02", name: "c2", addr: "10.80.0.102", memoryMiB: nodeBootUEFIMemoryMiB},
}

// nodeBootConfig is bootd's configuration for TestNodeBoot: a lab user, whom every node makes.
const nodeBootConfig = `[users.alice]
uid = 2001
comment = "Alice Example"
ssh_keys = ["` + nodeBootUserKey + `"]
`

const nodeBootUserKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKYn3pm2E8RDgg3QSPW9dCWbzvUxsjqpCJusmxRP2MhS alice@laptop"

// nodeBootUser is the stand-in systemd's line for alice after bootd-node overlay made her with
// the image's shadow-utils (the host's useradd and friends): her account, her group and her
// subordinate ids (2001 * 65536).
const nodeBootUser = "NODEBOOT-USER: alice:x:2001:2001:Alice Example:/home/alice:/bin/bash group alice:x:2001: " +
	"subuid alice:131137536:65536 subgid alice:131137536:65536"

// nodeBoot is what every PC of TestNodeBoot shares: one imgbuild build, one bootd.
type nodeBoot struct {
	dir    string // artifacts: consoles, QEMU logs
	lab    *vlab.Lab
	b      *vlab.Bootd
	rootfs artifact.File
	initrd artifact.File

	mu   sync.Mutex
	tpms map[string]tpmKeys // by node name: the PC's TPM as read before it booted
	vms  []*vlab.VM         // the PCs, up until the test ends
}

// TestNodeBoot is the node boot, end to end: imgbuild builds the compute image from stand-in
// RPMs (the Debian kernel as kernel-core, the stand-in dracut's live netroot as initramfs, the
// real bootd-node of the base layer, the host's curl), bootd serves it, and a BIOS PC and a UEFI
// PC netboot it: the initramfs fetches the squashfs over HTTP into RAM, checks its sha256,
// mounts it under a tmpfs overlay and switches root; the image's (stand-in) systemd runs
// bootd-overlay (the node's files, secrets included, from a privileged port) and bootd-report
// (hello, then the hardware). bootd ends up listing each PC's node ready with the hardware it
// reported. The BIOS PC has a TPM (swtpm): bootd records its endorsement key at this first boot
// and seals its files to it, which the real tpm2-tools and openssl of the image open; the UEFI PC
// has none and is listed as known by MAC and address only. Both stay up for what follows:
// machines that copy their MACs and addresses (TestNodeBoot's impostor subtests, tpm_test.go).
func TestNodeBoot(t *testing.T) {
	requirePrereqs(t, "qemu-system-x86_64", "ip", "go", "ldd", "swtpm", "tpm2_createek", "openssl")
	requireFiles(t, vlab.OVMFPath, filepath.Join(vlab.IPXEDir, "ipxe.efi"), filepath.Join(vlab.IPXEDir, "undionly.kpxe"))
	t.Setenv("SOURCE_DATE_EPOCH", testrepo.ImageEpoch)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	l := newImgLab(ctx, t)
	l.lock(ctx, t, "compute")
	r := l.build(ctx, t, "compute", filepath.Join("bootd", "images"), "cache", "1")
	img, err := artifact.Open(r.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if img.Manifest.Rootfs == nil {
		t.Fatalf("the compute image has no rootfs in its manifest: %+v", img.Manifest)
	}
	rootfs := img.Manifest.Files[img.Manifest.Rootfs.File]
	initrd := img.Manifest.Files[img.Manifest.Initrds[0]]
	t.Logf("compute/1: rootfs %s %d bytes (sha256 %s), initramfs %d bytes, cmdline %q",
		img.Manifest.Rootfs.File, rootfs.Size, rootfs.SHA256[:16], initrd.Size, img.Manifest.Cmdline)

	lab := newLab(ctx, t, "nodeboot", "10.80.0.1/24")
	config := filepath.Join(l.dir, "bootd.toml")
	if err := os.WriteFile(config, []byte(nodeBootConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	b := startBootdWith(ctx, t, lab, filepath.Join(l.dir, "bootd"), "--config", config)
	defer logTailOnFailure(t, b.Proc.LogPath)

	nb := &nodeBoot{dir: l.dir, lab: lab, b: b, rootfs: rootfs, initrd: initrd, tpms: map[string]tpmKeys{}}
	t.Cleanup(nb.killAll)
	// Both PCs at once, as at a site: two machines waiting, each assigned by its MAC. Under TCG
	// each VM keeps one core busy, so on two cores the pair takes about as long as the slower
	// one alone (one after the other took the sum: 80 s against 41 s here).
	figures := make([]string, len(nodeBootPCs))
	t.Run("firmware", func(t *testing.T) {
		for i, pc := range nodeBootPCs {
			t.Run(pc.fw.String(), func(t *testing.T) {
				t.Parallel()
				figures[i] = nb.boot(ctx, t, pc)
			})
		}
	})
	if out, err := b.CLI(ctx, "nodes"); err == nil {
		t.Logf("bootd nodes:\n%s", out)
	}
	for _, f := range figures {
		if f != "" {
			t.Logf("FIGURES %s", f)
		}
	}

	if t.Failed() {
		return // the PCs the impostors would copy did not come up
	}
	// While both nodes are up (they stay so, silent on the network), machines copy their MACs and
	// addresses (tpm_test.go).
	nb.impostors(ctx, t)

	t.Run("a root image whose sha256 differs is refused", func(t *testing.T) {
		tamperedRoot(ctx, t, lab, l.dir, r.Dir, rootfs.SHA256, img.Manifest.Cmdline)
	})
}

// boot powers on pc, sees it wait, assigns it, and follows its boot to the end: the initramfs
// fetches, checks and mounts the root image, the image's systemd gets the node's overlay and
// says hello, and bootd lists the node ready with its hardware. It returns the figures line.
func (nb *nodeBoot) boot(ctx context.Context, t *testing.T, pc nodePC) string {
	// The PC stays up once it has reported (it is killed when TestNodeBoot ends).
	spec := vlab.VMSpec{Name: "nodeboot-" + pc.fw.String() + "-" + pc.name, MAC: mustMAC(pc.mac), Firmware: pc.fw, MemoryMiB: pc.memoryMiB,
		AssetTag: testrepo.HoldAssetTag}
	if pc.tpm {
		spec.TPMDir = filepath.Join(nb.dir, pc.name+"-tpm")
		keys := readTPM(ctx, t, spec.TPMDir)
		nb.mu.Lock()
		nb.tpms[pc.name] = keys
		nb.mu.Unlock()
	}
	vm, err := nb.lab.StartVM(ctx, spec, nb.dir)
	if err != nil {
		t.Fatal(err)
	}
	nb.keep(vm)
	defer func() {
		if t.Failed() {
			t.Logf("console of %s (tail):\n%s", spec.Name, vm.ConsoleTail(80))
		}
	}()

	bootCtx, bootCancel := context.WithTimeout(ctx, 2*bootLimit)
	defer bootCancel()
	wait := func(re string) []string {
		t.Helper()
		m, err := vm.WaitConsole(bootCtx, regexp.MustCompile(re))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	wait(`waiting to be named`)
	if err := nb.b.WaitWaiting(bootCtx, spec.MAC.String()); err != nil {
		t.Fatal(err)
	}
	if out, err := nb.b.CLI(bootCtx, "assign", pc.name, "--mac", spec.MAC.String()); err != nil || !strings.Contains(out, "is "+pc.name) {
		t.Fatalf("bootd assign %s --mac %s: %v\n%s", pc.name, spec.MAC, err, out)
	}
	assigned := time.Now()
	cidr := pc.addr + "/24"

	// The initramfs: network from ip=/BOOTIF=, the squashfs fetched and checked, the live root.
	net := wait(`NODEBOOT-NET: (\S+) (\S+) host (\S+)`)
	if net[2] != cidr || net[3] != pc.name {
		t.Errorf("initramfs network %q, want %s host %s", net[0], cidr, pc.name)
	}
	fetched := wait(`NODEBOOT-ROOT: fetched (\d+) bytes sha256 ok \(([0-9a-f]{64})\)`)
	if fetched[1] != strconv.FormatInt(nb.rootfs.Size, 10) || fetched[2] != nb.rootfs.SHA256 {
		t.Errorf("node fetched %s bytes with sha256 %s; the manifest says %d, %s", fetched[1], fetched[2], nb.rootfs.Size, nb.rootfs.SHA256)
	}
	mem := wait(`NODEBOOT-MEM: MemAvailable before fetch (\d+) kB, after (\d+) kB; Shmem before (\d+) kB, after (\d+) kB`)
	wait(`NODEBOOT-ROOT-MOUNTED: squashfs on /dev/loop\d+ read-only, overlayfs upper on tmpfs`)
	wait(`NODEBOOT-SWITCH-ROOT`)

	// The image's systemd: the overlay, then the report units, then what they achieved.
	wait(`NODEBOOT-INIT: stand-in systemd as PID 1\b`)
	overlayStep := wait(`NODEBOOT-EXEC: bootd-overlay.service: /usr/libexec/bootd-node overlay: (ok in (\S+)s|failed.*)`)
	wait(`NODEBOOT-UNIT: bootd-overlay.service ok`)
	sealed := strings.Contains(vm.Console(), "bootd-node overlay: files sealed to this node's TPM, opened")
	if sealed != pc.tpm {
		t.Errorf("%s (TPM %v): its files came sealed to its TPM %v", pc.name, pc.tpm, sealed)
	}
	wait(`NODEBOOT-EXEC: bootd-report.service: /usr/libexec/bootd-node hello: ok`)
	helloAt := time.Since(vm.Started)
	wait(`NODEBOOT-EXEC: bootd-report.service: /usr/libexec/bootd-node report: ok`)
	wait(`NODEBOOT-UNIT: bootd-report.service ok`)
	if host := wait(`NODEBOOT-HOSTNAME: (\S+) \(/etc/hostname: (\S*)\)`); host[1] != pc.name || host[2] != pc.name {
		t.Errorf("hostname %q, want %s from the overlay's /etc/hostname", host[0], pc.name)
	}
	if ip := wait(`NODEBOOT-IP: (\S*) (\S*)`); ip[2] != cidr {
		t.Errorf("boot NIC %q, want %s", ip[0], cidr)
	}
	if key := wait(`NODEBOOT-MUNGE-KEY: (.*)`); strings.TrimSpace(key[1]) != "mode 400 owner 900:900" {
		t.Errorf("munge key %q, want mode 400 owner 900:900 (the munge layer's fixed ids)", key[1])
	}
	if hk := wait(`NODEBOOT-SSH-HOST-KEY: (\S+)`); hk[1] != "present" {
		t.Errorf("SSH host key %s, want present", hk[1])
	}
	if user := wait(`NODEBOOT-USER: .*`); strings.TrimSpace(user[0]) != nodeBootUser {
		t.Errorf("the lab's user on the node:\n%s\nwant:\n%s", user[0], nodeBootUser)
	}
	if key := wait(`NODEBOOT-USER-KEY: alice (.*)`); strings.TrimSpace(key[1]) != nodeBootUserKey {
		t.Errorf("alice's key on the node: %q, want %q", key[1], nodeBootUserKey)
	}
	ram := wait(`NODEBOOT-ROOTFS-RAM: squashfs (\d+) bytes in tmpfs /run, overlay upper (\d+) kB, MemTotal (\d+) kB, MemAvailable (\d+) kB`)
	if dev := wait(`NODEBOOT-TPM: (\S+)`); (dev[1] == "/dev/tpmrm0") != pc.tpm {
		t.Errorf("%s's TPM device: %s, want one: %v", pc.name, dev[1], pc.tpm)
	}
	wait(`NODEBOOT-DONE`)
	if said := regexp.MustCompile(`bootd-node accounts: .*`).FindAllString(vm.Console(), -1); len(said) > 0 {
		t.Errorf("bootd-node warned about the lab's users: %q", said)
	}
	wait(`NODEBOOT-HOLD`)

	// bootd's side: the overlay went to the node, it said hello and reported its hardware.
	log, _ := os.ReadFile(nb.b.Proc.LogPath)
	node, addr := regexp.QuoteMeta(pc.name), regexp.QuoteMeta(pc.addr)
	wants := []string{
		`msg="node is up" address=` + addr + ` .*node=` + node + `\b`,
		`msg="node reported its hardware" .*node=` + node + ` remote="` + addr + `:\d+"`,
	}
	keys := nb.tpmOf(pc.name)
	if pc.tpm {
		wants = append(wants,
			`msg="recorded the node's TPM endorsement key.*node=`+node+` tpm_ek_sha256=`+keys.fingerprint,
			`msg="sent node overlay" .*node=`+node+` remote="`+addr+`:\d+" sealed_to_ek=`+keys.fingerprint)
	} else {
		wants = append(wants, `msg="sent node overlay" .*identity=mac\+address .*node=`+node+` remote="`+addr+`:\d+"`)
	}
	if pc.fw == vlab.UEFI {
		// The firmware's own PXE fetched iPXE: the UEFI path, not an option ROM.
		wants = append(wants, `msg="tftp transfer done" .*file=ipxe\.efi`)
	}
	for _, want := range wants {
		if !regexp.MustCompile(want).Match(log) {
			t.Errorf("bootd's log has no line matching %s", want)
		}
	}
	nodes, err := nb.b.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n *inventory.Node
	for i := range nodes.Nodes {
		if nodes.Nodes[i].Name == pc.name {
			n = &nodes.Nodes[i]
		}
	}
	if n == nil {
		t.Fatalf("bootd nodes lists no %s: %+v", pc.name, nodes)
	}
	if n.State != inventory.StateReady || n.MAC != spec.MAC.String() || n.Address.String() != pc.addr || n.Hardware == nil ||
		n.Hardware.CPUs != 1 || n.Hardware.RealMemoryMiB <= 0 || n.Hardware.RealMemoryMiB > pc.memoryMiB {
		t.Errorf("%s in bootd nodes: state %s, MAC %s, address %s, hardware %+v; want ready, %s, %s, with 1 CPU and at most %d MiB",
			pc.name, n.State, n.MAC, n.Address, n.Hardware, spec.MAC, pc.addr, pc.memoryMiB)
	}
	switch {
	case pc.tpm && (n.TPM == nil || n.TPM.EKSHA256 != keys.fingerprint || n.TPM.Pinned):
		t.Errorf("%s's TPM in bootd nodes: %+v, want the endorsement key of its swtpm, %s, recorded at first boot", pc.name, n.TPM, keys.fingerprint)
	case !pc.tpm && n.TPM != nil:
		t.Errorf("%s has no TPM, bootd nodes lists one: %+v", pc.name, n.TPM)
	}
	t.Logf("console markers:\n%s", markers(vm.Console()))

	kB := func(s string) int { n, _ := strconv.Atoi(s); return n }
	return fmt.Sprintf("%s %s (TCG, 1 vCPU, %d MiB, NIC %s, TPM %v): power on to hello %s (assign to hello %s; bootd-node overlay %ss); squashfs %d bytes (%.1f MiB), initramfs %d bytes; "+
		"fetching the root image: MemAvailable %s -> %s kB (-%d kB), Shmem (tmpfs) %s -> %s kB (+%d kB); after boot: overlay upper %s kB, MemTotal %s kB, MemAvailable %s kB",
		strings.ToUpper(pc.fw.String()), pc.name, pc.memoryMiB, net[1], pc.tpm,
		helloAt.Round(100*time.Millisecond), (helloAt - assigned.Sub(vm.Started)).Round(100*time.Millisecond), overlayStep[2],
		nb.rootfs.Size, float64(nb.rootfs.Size)/(1<<20), nb.initrd.Size, mem[1], mem[2], kB(mem[1])-kB(mem[2]), mem[3], mem[4], kB(mem[4])-kB(mem[3]),
		ram[2], ram[3], ram[4])
}

// tamperedRoot boots the image's kernel and initramfs directly (no PXE: bootd never serves a
// file its manifest does not verify) with the command line bootd would give, but root=live:
// points at a busybox httpd in the lab serving a copy of the squashfs with one byte changed.
// The initramfs must refuse to boot, naming both hashes, never switch root, and stop the VM at
// once (the stand-in powers off; the real dracut halts or panics, see layers' bootd-verify).
func tamperedRoot(ctx context.Context, t *testing.T, lab *vlab.Lab, dir, imgDir, sha, cmdline string) {
	ctx, cancel := context.WithTimeout(ctx, bootLimit)
	defer cancel()
	www := filepath.Join(dir, "tampered-www")
	served := filepath.Join(www, "images", "tampered", "1")
	if err := os.MkdirAll(served, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(imgDir, "rootfs.squashfs"))
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(filepath.Join(served, "rootfs.squashfs"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := lab.Start(ctx, filepath.Join(dir, "tampered-httpd.log"), "busybox", "httpd", "-f", "-p", "10.80.0.1:8081", "-h", www); err != nil {
		t.Fatal(err)
	}
	// bootd's own command line for this node (httpd.KernelArgs), its live root on this server.
	appendArgs := liveRootArgs("10.80.0.1:8081", "10.80.0.166", "52:54:00:e2:b0:66", "tampered", "/images/tampered/1/rootfs.squashfs", sha, cmdline)
	vm, err := lab.StartKernelVM(ctx, vlab.KernelVMSpec{Name: "tampered", MAC: "52:54:00:e2:b0:66", MemoryMiB: nodeBootMemoryMiB,
		Kernel: filepath.Join(imgDir, "vmlinuz"), Initrd: filepath.Join(imgDir, "initramfs.img"), Append: appendArgs}, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Kill)
	started := vm.Started
	if err := vm.Wait(ctx); err != nil {
		t.Fatalf("the VM booting a tampered root did not power off: %v", err)
	}
	t.Logf("tampered root: the VM stopped %s after power on", time.Since(started).Round(time.Millisecond))
	got := strings.ReplaceAll(vm.Console(), "\r", "")
	m := regexp.MustCompile(`NODEBOOT-FATAL: root image \S+ has sha256 ([0-9a-f]{64}), want ([0-9a-f]{64})`).FindStringSubmatch(got)
	if m == nil || m[2] != sha || m[1] == sha {
		t.Errorf("the initramfs did not refuse the tampered root image; console markers:\n%s", markers(got))
	}
	if strings.Contains(got, "NODEBOOT-SWITCH-ROOT") || strings.Contains(got, "NODEBOOT-ROOT: fetched") {
		t.Errorf("the initramfs went on with a tampered root image:\n%s", markers(got))
	}
	t.Logf("tampered root, console markers:\n%s", markers(got))
}

// startBootdWith builds bootd and serves dir/images (an images directory imgbuild wrote) with
// its state under dir.
func startBootdWith(ctx context.Context, t *testing.T, lab *vlab.Lab, dir string, args ...string) *vlab.Bootd {
	t.Helper()
	bin := filepath.Join(dir, "bootd")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/bootd").CombinedOutput(); err != nil {
		t.Fatalf("build bootd: %v\n%s", err, out)
	}
	b, err := lab.StartBootd(ctx, bin, dir, append([]string{"--debug"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// markers returns the console's NODEBOOT lines.
func markers(console string) string {
	var out []string
	for _, line := range strings.Split(strings.ReplaceAll(console, "\r", ""), "\n") {
		if strings.Contains(line, "NODEBOOT") || strings.Contains(line, "imgbuild-standin-initramfs") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
