//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// dracutNMModules is the initramfs of Rocky 9's kind: systemd in it, NetworkManager bringing the
// network up (dracut's network-manager module needs dbus, hence systemd), the live root, and the
// base layer's bootd-verify and bootd-disk.
var dracutNMModules = []string{"bash", "base", "systemd", "systemd-initrd", "dracut-systemd", "network-manager",
	"dmsquash-live", "livenet", "bootd-verify", "bootd-disk"}

const (
	nmMarker      = "DRACUT-NM-LIVEROOT-OK"
	scratchSerial = "BOOTDSCRATCH1"
	otherSerial   = "OTHERDISK2"
	nmDNS         = "10.80.0.53"
)

// nmRootInit is the live root's /sbin/init for the NetworkManager boot: what NetworkManager made
// of the command line in the initramfs (the connection the booted node keeps), where the root's
// writes and /tmp went, then a file written to / and where it landed, then power off.
const nmRootInit = `#!/bin/busybox sh
bb=/bin/busybox
$bb mount -t proc proc /proc 2>/dev/null
echo "NM-PROFILES: $($bb ls /run/NetworkManager/system-connections/ 2>/dev/null | $bb tr '\n' ' ')"
for f in /run/NetworkManager/system-connections/*; do
	[ -f "$f" ] && echo "NM-DNS: $($bb grep '^dns=' "$f")"
done
echo "WRITABLE: $($bb cat /run/bootd-disk/state 2>/dev/null)"
echo "TMP: $($bb awk '$2 == "/tmp" { print $1 ":" $3 }' /proc/mounts)"
echo "DISK-MOUNT: $($bb awk '$2 ~ "^/run/bootd-disk/" { print $1 ":" $2 ":" $3 }' /proc/mounts)"
echo written-by-the-live-root > /bootd-marker
echo written-to-tmp > /tmp/bootd-tmp-marker
$bb sync
echo "UPPER: $($bb ls /run/bootd-disk/by-use/scratch/upper/ 2>/dev/null | $bb tr '\n' ' ')"
echo "SCRATCH-TMP: $($bb ls /run/bootd-disk/by-use/scratch/tmp/ 2>/dev/null | $bb tr '\n' ' ')"
echo "` + nmMarker + ` host=$($bb hostname)"
$bb sync
$bb poweroff -f
`

// TestRealDracutNetworkManager boots the live root through the initramfs Rocky 9 has: systemd and
// NetworkManager (Debian 12's dracut 059 and NetworkManager 1.42, unpacked, never installed), with
// bootd's kernel command line for a lab with a DNS server and a scratch disk handed over
// ([disks.scratch] by serial, rendered by config.NodeKernelArgs). The PC has two disks: the named
// one (blank: bootd-disk makes its XFS file system) and another holding an ext4 file system no
// rule names. Proven: NetworkManager's connection from ip= carries the DNS server from
// nameserver=; the root's writes and /tmp land on the scratch disk; the other disk's bytes are
// the same after the boot.
func TestRealDracutNetworkManager(t *testing.T) {
	requirePrereqs(t, "qemu-system-x86_64", "ip", "mksquashfs", "dpkg-deb", "unshare", "chroot", "cpio", "gzip", "mkfs.ext4", "mkfs.xfs", "blkid")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()

	initrd := filepath.Join(dir, "initramfs-nm.img")
	res, err := vlab.BuildDracutInitramfs(ctx, vlab.DracutSpec{
		WorkDir: dir, Output: initrd, Modules: dracutNMModules, ExtraModules: layerDracutModules,
		Drivers: []string{"virtio_pci", "virtio_blk"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("real dracut, systemd + NetworkManager: initramfs for %s built in %s", res.KernelRelease, res.Duration.Round(time.Millisecond))
	for _, line := range strings.Split(res.Log, "\n") {
		if strings.Contains(line, "dracut-install: ERROR") || strings.Contains(line, "dracut: FATAL") {
			t.Errorf("dracut: %s", line)
		}
	}
	for _, m := range []string{"systemd", "network-manager", "dbus", "livenet", "dmsquash-live", "bootd-verify", "bootd-disk"} {
		if !strings.Contains(res.Log, "*** Including module: "+m+" ***") {
			t.Errorf("dracut did not include module %s; log in %s", m, filepath.Join(dir, "dracut.log"))
		}
	}

	www := filepath.Join(dir, "www")
	sum := buildLiveRootWith(ctx, t, filepath.Join(dir, "liveroot"), filepath.Join(www, filepath.FromSlash(dracutImage)), nmRootInit)

	// The two disks: the scratch disk blank (sparse), the other an ext4 file system with a file.
	scratch, other := filepath.Join(dir, "scratch.img"), filepath.Join(dir, "other.img")
	mustRun(ctx, t, "truncate", "-s", "512M", scratch)
	mustRun(ctx, t, "truncate", "-s", "64M", other)
	mustRun(ctx, t, "mkfs.ext4", "-q", "-F", "-L", "LABDATA", other)
	otherBefore := fileSHA256(t, other)

	cfg := config.Default()
	cfg.Disks = []config.Disk{{Name: "scratch", Use: []string{config.DiskScratch}, Roles: []string{"compute"}, Serial: scratchSerial, MinSize: 256 << 20}}
	if err := cfg.Validate(netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	writable := cfg.NodeKernelArgs("c1", "compute")
	t.Logf("writable layer on the command line: %q", writable)

	lab := newLab(ctx, t, "dracutnm", dracutLabAddr)
	serveLab(ctx, t, lab, dracutServer+":80", www)
	cmdline := liveRootArgsDNS(dracutServer, dracutNodeIP, dracutMAC, "c1", dracutImage, sum, "panic=-1",
		[]netip.Addr{netip.MustParseAddr(nmDNS)}, writable...)
	vm, err := lab.StartKernelVM(ctx, vlab.KernelVMSpec{
		Name: "dracut-nm", MAC: dracutMAC, MemoryMiB: 768, Kernel: res.Kernel, Initrd: initrd, Append: cmdline,
		Disks: []vlab.Disk{{File: scratch, Serial: scratchSerial}, {File: other, Serial: otherSerial}},
	}, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Kill)
	bctx, bcancel := context.WithTimeout(ctx, 8*time.Minute)
	defer bcancel()
	m, err := vm.WaitConsole(bctx, regexp.MustCompile(nmMarker+` host=(\S+)`))
	if err != nil {
		t.Fatalf("%v\nconsole tail:\n%s", err, vlab.LastLines(vm.Console(), 40))
	}
	t.Logf("live root up through systemd + NetworkManager %s after power on", time.Since(vm.Started).Round(time.Millisecond))
	for _, p := range []string{"NM-PROFILES:", "NM-DNS:", "WRITABLE:", "TMP:", "DISK-MOUNT:", "UPPER:", "SCRATCH-TMP:", "bootd: "} {
		for _, l := range vm.ConsoleLines(p) {
			t.Logf("console: %s", strings.TrimSpace(l))
		}
	}
	if m[1] != "c1" {
		t.Errorf("hostname %q, want c1 (from ip=)", m[1])
	}
	want := map[string]string{
		"NM-DNS: ":      "dns=" + nmDNS + ";",
		"WRITABLE: ":    "scratch /dev/vda scratch",
		"DISK-MOUNT: ":  "/dev/vda:/run/bootd-disk/scratch:xfs",
		"TMP: ":         "/dev/vda:xfs",
		"UPPER: ":       "bootd-marker",
		"SCRATCH-TMP: ": "bootd-tmp-marker",
	}
	for prefix, w := range want {
		lines := vm.ConsoleLines(prefix)
		if len(lines) == 0 || !strings.Contains(lines[0], w) {
			t.Errorf("console %q: %q, want it to hold %q", prefix, lines, w)
		}
	}
	if l := vm.ConsoleLines("NetworkManager"); len(l) == 0 {
		t.Log("(NetworkManager logs nothing to the console without rd.debug)")
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := vm.Wait(wctx); err != nil {
		t.Errorf("after the marker: %v", err)
	}
	// The named disk is bootd's now; the other is untouched, byte for byte.
	if out, err := exec.CommandContext(ctx, "blkid", "-p", "-o", "export", scratch).Output(); err != nil || !strings.Contains(string(out), "LABEL=bootd-node") || !strings.Contains(string(out), "TYPE=xfs") {
		t.Errorf("scratch disk after the boot (%v):\n%s", err, out)
	}
	if got := fileSHA256(t, other); got != otherBefore {
		t.Errorf("the disk no rule names changed: sha256 %s, was %s", got, otherBefore)
	} else {
		t.Logf("the disk no rule names is unchanged: sha256 %s", got[:16])
	}
}

func mustRun(ctx context.Context, t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
