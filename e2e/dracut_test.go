//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/castr"
	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/fetchinitrd"
	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// dracutModules is what the real dracut puts into the test initramfs (dracut -m: these and what
// they depend on): the live root over HTTP (livenet, dmsquash-live, overlayfs), dracut's
// script-based network module (the host runs no systemd as PID 1, and network-legacy needs none),
// and the base layer's bootd-verify.
var dracutModules = []string{"bash", "base", "dmsquash-live", "livenet", "network-legacy", "bootd-verify", "bootd-disk"}

// layerDracutModules are the base layer's own dracut modules, copied into the unpacked dracut.
var layerDracutModules = map[string]string{
	"99bootd-verify": filepath.Join("..", "layers", "files", "base", "dracut", "99bootd-verify"),
	"98bootd-disk":   filepath.Join("..", "layers", "files", "base", "dracut", "98bootd-disk"),
}

const (
	dracutLabAddr = "10.80.0.1/24"
	dracutServer  = "10.80.0.1"
	dracutNodeIP  = "10.80.0.50"
	dracutMAC     = "52:54:00:e2:d0:01"
	dracutImage   = "/images/dracut-live/1/rootfs.squashfs"
	// dracutBigImage is a root with 96 MiB of random bytes more, booted by chunks: into RAM, then
	// into and from a cache disk, where the RAM it takes is measured against the image's size.
	dracutBigImage = "/images/dracut-live/2/rootfs.squashfs"
	dracutFillMiB  = 96
	// dracutCacheSerial names the cache disk in [disks.cache]; dracutOtherSerial is a disk no rule names.
	dracutCacheSerial = "BOOTDCACHE1"
	dracutOtherSerial = "LABDATA2"
	// dracutLiveMarker is what the live root's /sbin/init prints: only a switch_root into the
	// squashfs prints it.
	dracutLiveMarker = "DRACUT-LIVEROOT-OK"
)

// dracutRootInit is the live root's /sbin/init: the marker with the hostname dracut set from ip=,
// what / is (dmsquash-live's overlay over the squashfs), where its writes and its image cache
// are (bootd-disk), MemAvailable (kB) and the files behind the loop devices (the root image:
// in the initramfs's RAM, or on the cache disk), then power off.
const dracutRootInit = `#!/bin/busybox sh
bb=/bin/busybox
$bb mount -t proc proc /proc 2>/dev/null
echo "` + dracutLiveMarker + ` host=$($bb hostname) root=$($bb awk '$2 == "/" { r = $1 ":" $3 } END { print r }' /proc/mounts) writable=$($bb cat /run/bootd-disk/state 2>/dev/null | $bb tr ' ' '_') cache=$($bb cat /run/bootd-disk/cache.state 2>/dev/null | $bb tr ' ' '_') mem=$($bb awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) loop=$(for f in /sys/block/loop*/loop/backing_file; do $bb cat "$f" 2>/dev/null; done | $bb tr ' \n' '_,')"
$bb sync
$bb poweroff -f
`

// TestRealDracutLiveRoot boots the node's live root path with the REAL dracut (Debian 12's dracut
// 059, unpacked from its packages, never installed): an initramfs for the Debian kernel with
// network-legacy, livenet, dmsquash-live and the base layer's 99bootd-verify, booted by QEMU
// straight from -kernel/-initrd with bootd's kernel command line (static ip=, BOOTIF=,
// root=live:http://..., rd.live.image, rd.live.overlay.overlayfs=1, rd.bootd.sha256=). An HTTP
// file server in the lab serves a tiny squashfs root. With the right hash, livenet downloads
// it, bootd-verify accepts it, dmsquash-live mounts it under an overlay and dracut switches
// root into it; with a wrong hash bootd-verify refuses it, the root's init never runs, and the
// node stops at once (no rd.retry wait) without offering a shell.
func TestRealDracutLiveRoot(t *testing.T) {
	requirePrereqs(t, "qemu-system-x86_64", "ip", "mksquashfs", "dpkg-deb", "unshare", "chroot", "cpio", "gzip", "mkfs.ext4", "mkfs.xfs", "blkid", "mount")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir := t.TempDir()

	initrd := filepath.Join(dir, "initramfs-dracut.img")
	res, err := vlab.BuildDracutInitramfs(ctx, vlab.DracutSpec{
		WorkDir: dir, Output: initrd, Modules: dracutModules, ExtraModules: layerDracutModules,
		// The cache disk's driver: Rocky's initramfs carries every storage driver (not host-only).
		Drivers: []string{"virtio_pci", "virtio_blk"},
	})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(initrd)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("real dracut: initramfs for %s, %d bytes, built in %s", res.KernelRelease, fi.Size(), res.Duration.Round(time.Millisecond))
	for _, line := range strings.Split(res.Log, "\n") {
		if strings.Contains(line, "dracut-install: ERROR") || strings.Contains(line, "dracut: FATAL") {
			t.Errorf("dracut: %s", line)
		}
	}
	for _, m := range []string{"bootd-verify", "network-legacy", "livenet", "dmsquash-live", "overlayfs"} {
		if !strings.Contains(res.Log, "*** Including module: "+m+" ***") {
			t.Errorf("dracut did not include module %s; log in %s", m, filepath.Join(dir, "dracut.log"))
		}
	}
	checkDracutInitramfs(ctx, t, initrd)

	// The live root: busybox (static) and /sbin/init; /proc makes dmsquash-live take the
	// squashfs itself as the root and put an overlay over it.
	www := filepath.Join(dir, "www")
	img := filepath.Join(www, filepath.FromSlash(dracutImage))
	sum := buildDracutLiveRoot(ctx, t, filepath.Join(dir, "liveroot"), img)

	lab := newLab(ctx, t, "dracut", dracutLabAddr)
	srv := serveLab(ctx, t, lab, dracutServer+":80", www)

	// bootd's own kernel command line for a node with a live root (httpd.KernelArgs), with
	// panic=-1 as the image's arguments. This initramfs has no systemd, so dracut's script init is
	// PID 1 and a refused image stops the node the way bootd-verify does it there: init exits and
	// the kernel panics. panic=-1 makes the kernel reboot at once, which -no-reboot turns into
	// QEMU exiting; without it the VM would sit at the panic, stopped but running.
	// bootd's default writable layer: a tmpfs of [writable] ram.
	cmdline := func(hash string) string {
		return liveRootArgs(dracutServer, dracutNodeIP, dracutMAC, "node1", dracutImage, hash, "panic=-1", "rd.bootd.ram=25%")
	}
	boot := func(t *testing.T, name, hash string) *vlab.VM {
		t.Helper()
		vm, err := lab.StartKernelVM(ctx, vlab.KernelVMSpec{
			Name: name, MAC: dracutMAC, MemoryMiB: 512,
			Kernel: res.Kernel, Initrd: initrd, Append: cmdline(hash),
		}, dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(vm.Kill)
		return vm
	}

	t.Run("right-sha256", func(t *testing.T) {
		before := srv.count(dracutImage)
		vm := boot(t, "dracut-ok", sum)
		bctx, bcancel := context.WithTimeout(ctx, 5*time.Minute)
		defer bcancel()
		m, err := vm.WaitConsole(bctx, regexp.MustCompile(dracutLiveMarker+` host=(\S+) root=(\S+) writable=(\S*)`))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("live root up %s after power on: %s", time.Since(vm.Started).Round(time.Millisecond), m[0])
		if m[1] != "node1" {
			t.Errorf("hostname in the live root is %q, want node1 (from ip=)", m[1])
		}
		if !strings.HasSuffix(m[2], ":overlay") {
			t.Errorf("/ in the live root is %q, want dmsquash-live's overlay", m[2])
		}
		if m[3] != "ram_25%" {
			t.Errorf("the root's writes: %q, want bootd-disk's tmpfs of 25%% of RAM (rd.bootd.ram=25%%)", m[3])
		}
		for _, want := range []string{"bootd: root image sha256 ok", "dracut: fetching http://" + dracutServer + dracutImage, "dracut: Switching root"} {
			if len(vm.ConsoleLines(want)) == 0 {
				t.Errorf("console has no %q", want)
			}
		}
		// The check runs between the download and the mount: dmsquash-live-root is the wrapper.
		con := vm.Console()
		if ok, mounted := strings.Index(con, "bootd: root image sha256 ok"), strings.Index(con, "Mounted root filesystem"); ok < 0 || mounted < 0 || ok > mounted {
			t.Errorf("bootd-verify's check (console offset %d) does not come before dmsquash-live's mount (%d)", ok, mounted)
		}
		if got := srv.count(dracutImage) - before; got < 1 {
			t.Errorf("the HTTP server served %s %d times during the boot, want at least once", dracutImage, got)
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		if err := vm.Wait(wctx); err != nil {
			t.Errorf("after the marker: %v", err)
		}
		t.Logf("powered off %s after power on", time.Since(vm.Started).Round(time.Millisecond))
	})

	t.Run("wrong-sha256", func(t *testing.T) {
		before := srv.count(dracutImage)
		wrong := sha256.Sum256([]byte("not the image bootd verified"))
		want := hex.EncodeToString(wrong[:])
		vm := boot(t, "dracut-bad", want)
		bctx, bcancel := context.WithTimeout(ctx, 5*time.Minute)
		defer bcancel()
		if _, err := vm.WaitConsole(bctx, regexp.MustCompile(`dracut: FATAL: bootd: refusing a root image`)); err != nil {
			t.Fatal(err)
		}
		refused := time.Since(vm.Started)
		warn := vm.ConsoleLines("bootd: root image ")
		if len(warn) == 0 || !strings.Contains(warn[0], "has sha256 "+sum+", want "+want) {
			t.Errorf("bootd-verify's warning: %q, want the image's sha256 %s and the expected %s", warn, sum, want)
		}
		// The refusal stops the node at once: bootd-verify has init give up (rd.emergency=halt:
		// no halt without systemd, so init exits), the kernel panics (panic=-1: reboot,
		// -no-reboot ends QEMU). Without that, dracut waited rd.retry (180 s) for a root and
		// then opened its emergency shell. The bound leaves TCG room and stays far below.
		wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
		defer wcancel()
		if err := vm.Wait(wctx); err != nil {
			t.Errorf("the refused boot did not end: %v", err)
		}
		ended := time.Since(vm.Started)
		t.Logf("refused %s after power on; VM ended %s after power on, %s after the refusal",
			refused.Round(time.Millisecond), ended.Round(time.Millisecond), (ended - refused).Round(time.Millisecond))
		if d := ended - refused; d > 60*time.Second {
			t.Errorf("the VM ended %s after the refusal, want at once (under 60 s)", d.Round(time.Millisecond))
		}
		for _, want := range []string{
			"bootd: root image refused: stopping the node (halt), no shell",
			"bootd: init gives up",
			"Kernel panic - not syncing: Attempted to kill init",
		} {
			if len(vm.ConsoleLines(want)) == 0 {
				t.Errorf("console has no %q", want)
			}
		}
		t.Logf("console:\n%s\n%s", strings.Join(vm.ConsoleLines("bootd"), "\n"), strings.Join(vm.ConsoleLines("Kernel panic"), "\n"))
		// Nothing may reach the live root, and no shell may be offered: dracut's emergency
		// shell (its banner and prompt), the rd.retry timeout, init's EXIT trap.
		for _, never := range []string{dracutLiveMarker, "dracut: Switching root", "bootd: root image sha256 ok", "Mounted root filesystem",
			"Dropping to debug shell", "Entering emergency mode", "dracut:/#", "Could not boot", "Signal caught", "rdsosreport"} {
			if l := vm.ConsoleLines(never); len(l) > 0 {
				t.Errorf("a refused image went on to %q: %q", never, l)
			}
		}
		if got := srv.count(dracutImage) - before; got < 1 {
			t.Errorf("the HTTP server served %s %d times during the boot, want at least once (the refusal must follow a download)", dracutImage, got)
		}
	})

	// By chunks: the version is published with a casync index over a chunk store (as imgbuild
	// does), bootd's fetch program rides in a second initrd (as bootd sends it), and the command
	// line names the index with its hash. The node rebuilds the root from the chunks, checks it,
	// and boots it; the whole file is never downloaded. The root is the big one: this boot, with
	// no disk, is the RAM path the cache disk's boots are measured against.
	bigImg := filepath.Join(www, filepath.FromSlash(dracutBigImage))
	bigSum := buildBigLiveRoot(ctx, t, filepath.Join(dir, "bigroot"), bigImg)
	bigSize := fileSize(t, bigImg)
	images := filepath.Join(www, "images")
	index := filepath.Join(filepath.Dir(bigImg), castr.IndexFile)
	indexPath := path.Join(path.Dir(dracutBigImage), castr.IndexFile)
	if _, err := castr.Chunk(ctx, bigImg, images, index); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(castr.StorePath(images), filepath.Join(www, "chunks")); err != nil {
		t.Fatal(err)
	}
	ib, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	isum := sha256.Sum256(ib)
	idx, err := castr.ReadIndex(index)
	if err != nil {
		t.Fatal(err)
	}
	both := filepath.Join(dir, "initramfs-with-fetch.img")
	buildFetchInitrd(ctx, t, initrd, both)
	// rootBytes is what the server sent of the root so far: the whole file, its index, chunks.
	rootBytes := func() int64 {
		return srv.bytesOf(dracutBigImage) + srv.bytesOf(indexPath) + srv.prefixBytes("/chunks/")
	}
	// chunkBoot boots by chunks with the writable layer's arguments and disks given, and returns
	// the marker's fields once the live root is up.
	chunkBoot := func(t *testing.T, name string, disks []vlab.Disk, writable ...string) (*vlab.VM, []string) {
		t.Helper()
		args := chunkedRootArgs(dracutServer, dracutNodeIP, dracutMAC, "node1", dracutBigImage, bigSum, castr.IndexFile, hex.EncodeToString(isum[:]), "panic=-1", writable...)
		vm, err := lab.StartKernelVM(ctx, vlab.KernelVMSpec{Name: name, MAC: dracutMAC, MemoryMiB: 512,
			Kernel: res.Kernel, Initrd: both, Append: args, Disks: disks}, dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(vm.Kill)
		bctx, bcancel := context.WithTimeout(ctx, 8*time.Minute)
		defer bcancel()
		m, err := vm.WaitConsole(bctx, regexp.MustCompile(dracutLiveMarker+` host=(\S+) root=(\S+) writable=(\S*) cache=(\S*) mem=(\d+) loop=(\S*)`))
		if err != nil {
			t.Fatalf("%v\nconsole tail:\n%s", err, vlab.LastLines(vm.Console(), 40))
		}
		t.Logf("live root up %s after power on: %s", time.Since(vm.Started).Round(time.Millisecond), m[0])
		for _, l := range vm.ConsoleLines("bootd") {
			t.Logf("console: %s", strings.TrimSpace(l))
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		if err := vm.Wait(wctx); err != nil {
			t.Errorf("after the marker: %v", err)
		}
		return vm, m
	}
	var ramAvail int64 // MemAvailable (kB) in the live root booted into RAM
	t.Run("by-chunks", func(t *testing.T) {
		whole0, index0, chunks0, bytes0 := srv.count(dracutBigImage), srv.count(indexPath), srv.prefixCount("/chunks/"), rootBytes()
		vm, m := chunkBoot(t, "dracut-chunks", nil)
		for _, want := range []string{"bootd: fetching the root image by chunks", "root image fetched and checked", "bootd: root image sha256 ok", "dracut: Switching root"} {
			if len(vm.ConsoleLines(want)) == 0 {
				t.Errorf("console has no %q", want)
			}
		}
		t.Logf("fetch: %q", vm.ConsoleLines("root image fetched"))
		if got := srv.count(dracutBigImage) - whole0; got != 0 {
			t.Errorf("the whole image was downloaded %d times; want chunks only", got)
		}
		if got := srv.count(indexPath) - index0; got != 1 {
			t.Errorf("the index was downloaded %d times, want once", got)
		}
		if got := srv.prefixCount("/chunks/") - chunks0; got < len(idx.Chunks) {
			t.Errorf("%d chunk requests, want at least the index's %d chunks", got, len(idx.Chunks))
		}
		if !strings.Contains(m[6], "/tmp/bootd/rootfs.img") {
			t.Errorf("loop devices' files %q, want the image in the initramfs's RAM (/tmp/bootd/rootfs.img)", m[6])
		}
		ramAvail = atoi64(t, m[5])
		t.Logf("RAM path: %d bytes of root served, MemAvailable %d kB with the %d-byte image in RAM", rootBytes()-bytes0, ramAvail, bigSize)
	})

	// The node's image cache on a disk bootd was handed ([disks.cache], use = ["cache"], by
	// serial), beside a disk no rule names (an ext4 file system that must stay byte for byte).
	// First boot: the blank cache disk gets bootd's file system and the image, fetched by
	// chunks, and the root is mounted from it. Second boot: nothing fetched, the root from the
	// disk, RAM for the root measured against the RAM path. Then a damaged copy on the disk:
	// refused, its good chunks reused, the rest fetched, the root booted checked.
	cacheDisk, otherDisk := filepath.Join(dir, "cache.img"), filepath.Join(dir, "other.img")
	mustRun(ctx, t, "truncate", "-s", "512M", cacheDisk)
	mustRun(ctx, t, "truncate", "-s", "64M", otherDisk)
	mustRun(ctx, t, "mkfs.ext4", "-q", "-F", "-L", "LABDATA", otherDisk)
	otherBefore := fileSHA256(t, otherDisk)
	cfg := config.Default()
	cfg.Disks = []config.Disk{{Name: "cache", Use: []string{config.DiskCache}, Roles: []string{"compute"}, Serial: dracutCacheSerial}}
	if err := cfg.Validate(netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	writable := cfg.NodeKernelArgs("node1", "compute")
	disks := []vlab.Disk{{File: cacheDisk, Serial: dracutCacheSerial}, {File: otherDisk, Serial: dracutOtherSerial}}
	cachedImage := "/run/bootd-disk/cache/images/" + bigSum + ".img"
	cacheBoot := func(t *testing.T, name string) (*vlab.VM, []string, int64, ctl.Root) {
		t.Helper()
		bytes0, reports0 := rootBytes(), len(srv.rootReports())
		vm, m := chunkBoot(t, name, disks, writable...)
		served := rootBytes() - bytes0
		if m[4] != "cache_/dev/vda_cache" {
			t.Errorf("cache disk %q, want cache /dev/vda cache", m[4])
		}
		if !strings.Contains(m[6], cachedImage) {
			t.Errorf("loop devices' files %q, want the image on the cache disk (%s): the root mounted from the disk", m[6], cachedImage)
		}
		if len(vm.ConsoleLines("bootd: root image sha256 ok")) == 0 {
			t.Error("console has no bootd: root image sha256 ok")
		}
		var rep ctl.Root
		if r := srv.rootReports(); len(r) != reports0+1 {
			t.Errorf("the node reported its root %d times, want once", len(r)-reports0)
		} else if err := json.Unmarshal([]byte(r[len(r)-1]), &rep); err != nil {
			t.Errorf("root report %q: %v", r[len(r)-1], err)
		}
		return vm, m, served, rep
	}
	t.Run("cache-first-boot", func(t *testing.T) {
		vm, _, served, rep := cacheBoot(t, "dracut-cache1")
		t.Logf("first boot with a blank cache disk: %d bytes of root served (image %d); report %+v", served, bigSize, rep)
		if served < bigSize {
			t.Errorf("%d bytes of root served, want the image's %d at least (the cache was blank)", served, bigSize)
		}
		if rep.Source != "chunks" || rep.Storage != "disk" {
			t.Errorf("root report %+v, want chunks to disk (ROOT: fetched to cache)", rep)
		}
		if len(vm.ConsoleLines("bootd: /dev/vda is blank: making bootd's file system on it")) == 0 {
			t.Error("console does not say the blank cache disk got bootd's file system")
		}
	})
	t.Run("cache-hit", func(t *testing.T) {
		vm, m, served, rep := cacheBoot(t, "dracut-cache2")
		avail := atoi64(t, m[5])
		rootRAM := bigSize - (avail-ramAvail)*1024
		t.Logf("second boot: %d bytes of root served; MemAvailable %d kB vs %d kB on the RAM path: the root takes %d bytes of RAM, %.1f%% of the %d-byte image (target <= 5%%); report %+v",
			served, avail, ramAvail, rootRAM, 100*float64(rootRAM)/float64(bigSize), bigSize, rep)
		if served > 1<<20 {
			t.Errorf("second boot: %d bytes of root served, want at most 1 MiB", served)
		}
		// The target (5%) is reported, not asserted: MemAvailable discounts the image's clean,
		// evictable page cache (the boot reads it whole), so it reads 6% here; what the root pins
		// is about nothing (BENCHMARKS.md, node image cache). Asserted: the image is not in RAM
		// (there it takes all of it).
		if ramAvail > 0 && rootRAM > bigSize/10 {
			t.Errorf("the root from the cache disk takes %d bytes of RAM, want far less than the image (at most %d)", rootRAM, bigSize/10)
		}
		if rep.Source != "cache" || rep.Storage != "disk" || rep.FromBootd != 0 {
			t.Errorf("root report %+v, want a cache hit (ROOT: cache hit)", rep)
		}
		if len(vm.ConsoleLines("root image found on the cache disk and checked: nothing fetched")) == 0 {
			t.Error("console does not say the cache held the image")
		}
	})
	t.Run("cache-corrupt", func(t *testing.T) {
		// One byte in the middle of the cached image, changed on the disk while the node is off.
		corruptCachedImage(ctx, t, cacheDisk, "images/"+bigSum+".img", bigSize/2)
		chunks0 := srv.prefixCount("/chunks/")
		_, _, served, rep := cacheBoot(t, "dracut-cache3")
		fetched := srv.prefixCount("/chunks/") - chunks0
		t.Logf("damaged cache: %d chunks (%d bytes of root) fetched again of %d; report %+v", fetched, served, len(idx.Chunks), rep)
		if fetched < 1 || fetched > 2 {
			t.Errorf("%d chunks fetched, want the damaged one (at most 2)", fetched)
		}
		if rep.Source != "chunks" || rep.FromSeeds < bigSize*9/10 {
			t.Errorf("root report %+v, want the image rebuilt from the damaged copy's good chunks", rep)
		}
	})
	t.Run("unnamed-disk-untouched", func(t *testing.T) {
		if got := fileSHA256(t, otherDisk); got != otherBefore {
			t.Errorf("the disk no rule names changed: sha256 %s, was %s", got, otherBefore)
		}
		if out, err := exec.CommandContext(ctx, "blkid", "-p", "-o", "export", cacheDisk).Output(); err != nil || !strings.Contains(string(out), "LABEL=bootd-node") {
			t.Errorf("cache disk (%v):\n%s", err, out)
		}
	})
}

// buildBigLiveRoot is buildDracutLiveRoot with dracutFillMiB of random bytes (as compressed
// files are: squashfs keeps them as they are) in /usr/share/fill.
func buildBigLiveRoot(ctx context.Context, t *testing.T, root, img string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, "usr", "share"), 0o755); err != nil {
		t.Fatal(err)
	}
	fill := make([]byte, dracutFillMiB<<20)
	rng := rand.New(rand.NewPCG(30, 29))
	for i := 0; i+8 <= len(fill); i += 8 {
		binary.LittleEndian.PutUint64(fill[i:], rng.Uint64())
	}
	if err := os.WriteFile(filepath.Join(root, "usr", "share", "fill"), fill, 0o644); err != nil {
		t.Fatal(err)
	}
	return buildDracutLiveRoot(ctx, t, root, img)
}

// corruptCachedImage changes one byte at off of file on the XFS disk image disk (in a mount
// namespace of its own: the mount ends with it).
func corruptCachedImage(ctx context.Context, t *testing.T, disk, file string, off int64) {
	t.Helper()
	mnt := t.TempDir()
	script := `set -e
mount -t xfs -o loop "$1" "$2"
b=$(dd if="$2/$3" bs=1 skip="$4" count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
printf "\\$(printf %o $(( (b + 1) % 256 )))" | dd of="$2/$3" bs=1 seek="$4" conv=notrunc 2>/dev/null
sync
umount "$2"`
	if out, err := exec.CommandContext(ctx, "unshare", "-m", "sh", "-c", script, "sh", disk, mnt, file, strconv.FormatInt(off, 10)).CombinedOutput(); err != nil {
		t.Fatalf("corrupt %s on %s: %v\n%s", file, disk, err, out)
	}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func atoi64(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// liveRootArgs is the kernel command line bootd renders (httpd.KernelArgs) for node name at
// addr/24 with mac, whose live root is served at http://server<image> (/images/<name>/<version>/
// <file>) with sha256 hash, the image's own arguments extra, and the writable layer's.
func liveRootArgs(server, addr, mac, name, image, hash, extra string, writable ...string) string {
	return liveRootArgsDNS(server, addr, mac, name, image, hash, extra, nil, writable...)
}

// liveRootArgsDNS is liveRootArgs for a lab with DNS servers (nameserver=).
func liveRootArgsDNS(server, addr, mac, name, image, hash, extra string, dns []netip.Addr, writable ...string) string {
	parts := strings.Split(strings.TrimPrefix(image, "/"), "/") // images, name, version, file
	hw, _ := net.ParseMAC(mac)
	opts := httpd.Options{BaseURL: "http://" + server, Netmask: netip.MustParseAddr("255.255.255.0"), Gateway: netip.MustParseAddr(strings.Split(server, ":")[0]), DNS: dns}
	return httpd.KernelArgs(opts, httpd.Target{
		Name: name, Address: netip.MustParseAddr(addr), MAC: hw,
		Image: parts[1], Version: parts[2], Rootfs: parts[3], RootfsSHA256: hash, Cmdline: extra, WritableArgs: writable,
	})
}

// checkDracutInitramfs checks that bootd-verify's wrapper took dmsquash-live-root's place in the
// archive dracut wrote.
func checkDracutInitramfs(ctx context.Context, t *testing.T, img string) {
	t.Helper()
	// dracut 059 writes one gzip member here (--no-early-microcode: no uncompressed prefix).
	out, err := exec.CommandContext(ctx, "sh", "-c", `gzip -dc < "$1" | cpio -it --quiet`, "sh", img).Output()
	if err != nil {
		t.Fatalf("list %s: %v", img, err)
	}
	names := map[string]bool{}
	for _, n := range strings.Fields(string(out)) {
		names[strings.TrimPrefix(n, "./")] = true
	}
	for _, want := range []string{"usr/sbin/dmsquash-live-root", "usr/sbin/dmsquash-live-root.unchecked", "usr/sbin/livenetroot", "usr/sbin/livenetroot.whole", "usr/bin/sha256sum", "usr/bin/curl"} {
		if !names[want] && !names[strings.TrimPrefix(want, "usr/")] {
			t.Errorf("initramfs lacks %s", want)
		}
	}
}

// buildDracutLiveRoot writes the live root squashfs to img and returns its sha256.
func buildDracutLiveRoot(ctx context.Context, t *testing.T, root, img string) string {
	return buildLiveRootWith(ctx, t, root, img, dracutRootInit)
}

// buildLiveRootWith is buildDracutLiveRoot with init as the root's /sbin/init.
func buildLiveRootWith(ctx context.Context, t *testing.T, root, img, init string) string {
	t.Helper()
	for _, d := range []string{"bin", "sbin", "proc", "sys", "dev", "run", "tmp", "etc", "var", "usr"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("the live root needs a static busybox: %v (apt-get install busybox-static)", err)
	}
	if out, err := exec.CommandContext(ctx, "ldd", "/bin/busybox").CombinedOutput(); err == nil && !strings.Contains(string(out), "not a dynamic executable") {
		t.Fatalf("/bin/busybox is dynamically linked (apt-get install busybox-static): %s", out)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(root, "bin", "sh")); err != nil {
		t.Fatal(err)
	}
	// systemd in the initramfs switches only into an OS tree: one with an os-release file.
	if err := os.WriteFile(filepath.Join(root, "etc", "os-release"), []byte("NAME=\"bootd live-root test\"\nID=bootd-test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sbin", "init"), []byte(init), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(img), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "mksquashfs", root, img, "-noappend", "-quiet", "-all-root", "-no-progress").CombinedOutput(); err != nil {
		t.Fatalf("mksquashfs: %v: %s (apt-get install squashfs-tools)", err, out)
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	t.Logf("live root: %s, %d bytes, sha256 %x", img, len(b), s)
	return hex.EncodeToString(s[:])
}

// labFileServer is an http.FileServer listening inside a lab namespace, counting what it served.
type labFileServer struct {
	mu     sync.Mutex
	served map[string]int
	bytes  map[string]int64 // bytes sent, by path
	roots  []string         // bodies of POST /api/v1/node/root (the node's report to bootd)
}

// bytesOf is how many bytes were sent for path.
func (s *labFileServer) bytesOf(path string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes[path]
}

// prefixBytes is how many bytes were sent for paths under prefix.
func (s *labFileServer) prefixBytes(prefix string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for p, b := range s.bytes {
		if strings.HasPrefix(p, prefix) {
			n += b
		}
	}
	return n
}

func (s *labFileServer) rootReports() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.roots)
}

// countingWriter counts the body bytes written through it.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

func (s *labFileServer) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served[path]
}

// prefixCount is how many requests had a path under prefix.
func (s *labFileServer) prefixCount(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for p, c := range s.served {
		if strings.HasPrefix(p, prefix) {
			n += c
		}
	}
	return n
}

// buildFetchInitrd writes to out the dracut initramfs followed by the initrd bootd sends with a
// chunked version (bootd-fetch, built static as make build builds it): the kernel unpacks
// both, as it does the two initrds iPXE loads.
func buildFetchInitrd(ctx context.Context, t *testing.T, initrd, out string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "bootd-fetch")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s", "-o", bin, "../cmd/bootd-fetch")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build bootd-fetch: %v: %s", err, b)
	}
	prog, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	extra, err := fetchinitrd.Make(prog)
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(initrd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, append(base, extra...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// chunkedRootArgs is liveRootArgs for a version published by chunks, with bootd's fetch initrd.
func chunkedRootArgs(server, addr, mac, name, image, hash, index, indexHash, extra string, writable ...string) string {
	parts := strings.Split(strings.TrimPrefix(image, "/"), "/")
	hw, _ := net.ParseMAC(mac)
	opts := httpd.Options{BaseURL: "http://" + server, Netmask: netip.MustParseAddr("255.255.255.0"),
		Gateway: netip.MustParseAddr(server), FetchInitrd: fetchinitrd.Name}
	return httpd.KernelArgs(opts, httpd.Target{
		Name: name, Address: netip.MustParseAddr(addr), MAC: hw, Image: parts[1], Version: parts[2], Rootfs: parts[3],
		RootfsSHA256: hash, RootfsIndex: index, RootfsIndexSHA256: indexHash, Cmdline: extra, WritableArgs: writable,
	})
}

// serveLab serves dir over HTTP on addr inside the lab's namespace (the socket is made there;
// the server runs in this process) until the test ends.
func serveLab(ctx context.Context, t *testing.T, lab *vlab.Lab, addr, dir string) *labFileServer {
	t.Helper()
	var ln net.Listener
	if err := vlab.InNetns(lab.Name, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s := &labFileServer{served: map[string]int{}, bytes: map[string]int64{}}
	fsrv := http.FileServer(http.Dir(dir))
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path == "/api/v1/node/root" {
				b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
				s.mu.Lock()
				s.roots = append(s.roots, string(b))
				s.mu.Unlock()
				w.WriteHeader(http.StatusNoContent)
				return
			}
			s.mu.Lock()
			s.served[r.URL.Path]++
			s.mu.Unlock()
			cw := &countingWriter{ResponseWriter: w}
			fsrv.ServeHTTP(cw, r)
			s.mu.Lock()
			s.bytes[r.URL.Path] += cw.n
			s.mu.Unlock()
		}),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	t.Cleanup(func() {
		_ = hs.Close()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("lab HTTP server: %v", err)
		}
	})
	return s
}
