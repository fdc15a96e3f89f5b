package testrepo_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/rpmcmd"
	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
)

var serviceNames = []string{"bash", "dracut", "kernel", "munge", "slurm-slurmd-ohpc", "chrony", "hello", "curl", "systemd", "shadow-utils"}

// treeHashes maps each regular file under dir to its sha256.
func treeHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		sum := sha256.Sum256(data)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func hostKernel(t *testing.T) testrepo.KernelFiles {
	t.Helper()
	k, err := testrepo.HostKernel()
	if err != nil {
		t.Fatalf("%v (scripts/setup-debian.sh installs linux-image-amd64)", err)
	}
	return k
}

func TestBuildIsReproducible(t *testing.T) {
	testrepo.NeedTools(t)
	ctx := testrepo.Context(t)
	pkgs := testrepo.Standins(serviceNames, hostKernel(t))
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		if err := testrepo.Build(ctx, dir, pkgs); err != nil {
			t.Fatal(err)
		}
	}
	ha, hb := treeHashes(t, a), treeHashes(t, b)
	if len(ha) == 0 {
		t.Fatal("no files built")
	}
	for name, sum := range ha {
		if hb[name] != sum {
			t.Errorf("%s differs between two builds", name)
		}
	}
	if len(ha) != len(hb) {
		t.Errorf("builds have %d and %d files", len(ha), len(hb))
	}
	// The closure pulled the base packages in.
	for _, want := range []string{"setup", "filesystem", "kernel-core"} {
		p := testrepo.Standin(want, hostKernel(t))
		path := filepath.Join("Packages", want[:1], p.FileName())
		if _, ok := ha[path]; !ok {
			t.Errorf("%s not built (want %s)", want, path)
		}
	}
}

func allRPMs(t *testing.T, repo string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repo, "Packages", "*", "*.rpm"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rpms in %s: %v", repo, err)
	}
	return files
}

// TestStandinsInstallAndRun installs every stand-in into a root with the
// real rpm and runs what the image build runs inside it.
func TestStandinsInstallAndRun(t *testing.T) {
	testrepo.NeedTools(t)
	ctx := testrepo.Context(t)
	k := hostKernel(t)
	repo := t.TempDir()
	if err := testrepo.Build(ctx, repo, testrepo.Standins(serviceNames, k)); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	opt := rpmcmd.InstallOptions{WorkDir: t.TempDir(), SourceDateEpoch: testrepo.SourceDateEpoch}
	if err := rpmcmd.InstallFiles(ctx, root, allRPMs(t, repo), opt); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{
		"usr/bin/busybox", "etc/passwd", "etc/group", "boot/vmlinuz-" + k.Release,
		"usr/lib/modules/" + k.Release + "/vmlinuz",
		"usr/lib/systemd/system/munge.service", "usr/lib/systemd/system/slurmd.service",
		"usr/lib/systemd/system/chronyd.service", "usr/share/standin/hello",
	} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("after install: %v", err)
		}
	}
	if l, err := os.Readlink(filepath.Join(root, "bin")); err != nil || l != "usr/bin" {
		t.Errorf("/bin = %q, %v; want a symlink to usr/bin", l, err)
	}
	out := chroot(t, root, "/bin/bash", "-c", "mkdir -p /tmp/x && echo ok")
	if strings.TrimSpace(out) != "ok" {
		t.Errorf("bash in the image: %q", out)
	}
	// The host's curl runs in the image with the libraries and loader it shipped.
	if out := chroot(t, root, "/usr/bin/curl", "--version"); !strings.HasPrefix(out, "curl ") {
		t.Errorf("curl --version in the image: %q", out)
	}
	// So does its useradd, beside curl (both ship the same libraries: rpm takes identical files).
	if out := chroot(t, root, "/usr/bin/busybox", "sh", "-c", "/usr/sbin/useradd -u 2001 -M alice && busybox grep ^alice: /etc/passwd"); out != "alice:x:2001:2001::/home/alice:/bin/bash\n" {
		t.Errorf("useradd in the image: %q", out)
	}
	if out := chroot(t, root, "/usr/bin/busybox", "sh", "-c", "busybox mount -t proc proc /proc && /usr/sbin/slurmd -C; busybox umount /proc"); !regexp.MustCompile(`^NodeName=\S+ CPUs=[1-9]\d* Boards=1 .*RealMemory=[1-9]\d*\n`).MatchString(out) {
		t.Errorf("slurmd -C in the image: %q", out)
	}
	if l, err := os.Readlink(filepath.Join(root, "usr/sbin/init")); err != nil || l != "../lib/systemd/systemd" {
		t.Errorf("/usr/sbin/init -> %q, %v", l, err)
	}
	img := "/boot/initramfs-" + k.Release + ".img"
	var sums []string
	for i := 0; i < 2; i++ {
		chroot(t, root, "dracut", "--no-hostonly", "--reproducible", "--force", img, k.Release)
		data, err := os.ReadFile(filepath.Join(root, img))
		if err != nil {
			t.Fatal(err)
		}
		checkInitramfs(t, data, k.Release)
		sum := sha256.Sum256(data)
		sums = append(sums, hex.EncodeToString(sum[:]))
	}
	if sums[0] != sums[1] {
		t.Errorf("dracut stand-in is not reproducible: %s vs %s", sums[0], sums[1])
	}
}

func chroot(t *testing.T, root string, args ...string) string {
	t.Helper()
	cmd := exec.Command("chroot", append([]string{root}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin", "SOURCE_DATE_EPOCH=1700000000"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chroot %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// checkInitramfs lists the archive with the host's GNU cpio, a reader that
// owes nothing to the script that wrote it, and checks /init.
func checkInitramfs(t *testing.T, data []byte, rel string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("initramfs is not gzip: %v", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("initramfs gzip: %v", err)
	}
	dir := t.TempDir()
	cmd := exec.Command("cpio", "-idm", "--quiet", "--no-absolute-filenames")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(raw)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v\n%s", err, out)
	}
	var names []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if rel, _ := filepath.Rel(dir, p); rel != "." {
			names = append(names, rel)
		}
		return nil
	})
	sort.Strings(names)
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	// The skeleton, and kernel-core's netboot modules with their modules.dep.
	mod := "lib/modules/" + rel
	want := []string{"bin", "bin/busybox", "bin/sh", "dev", "dev/console", "etc/standin-kver", "init", "proc", "run", "sys", "sysroot",
		mod + "/modules.dep", mod + "/kernel/fs/squashfs/squashfs.ko", mod + "/kernel/fs/overlayfs/overlay.ko",
		mod + "/kernel/drivers/net/ethernet/intel/e1000/e1000.ko", mod + "/kernel/drivers/net/virtio_net.ko"}
	for _, w := range want {
		if !have[w] {
			t.Errorf("initramfs lacks %s; holds %q", w, names)
		}
	}
	dep, err := os.ReadFile(filepath.Join(dir, mod, "modules.dep"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(dep)), "\n") {
		file, deps, _ := strings.Cut(line, ":")
		for _, f := range append(strings.Fields(deps), file) {
			if !have[mod+"/"+f] {
				t.Errorf("modules.dep names %s, which the initramfs lacks", f)
			}
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "dev/console")); err != nil || st.Mode()&fs.ModeCharDevice == 0 {
		t.Errorf("dev/console: %v %v, want a character device", st, err)
	}
	if kv, err := os.ReadFile(filepath.Join(dir, "etc/standin-kver")); err != nil || strings.TrimSpace(string(kv)) != rel {
		t.Errorf("etc/standin-kver: %q %v, want %s", kv, err, rel)
	}
	init, err := os.ReadFile(filepath.Join(dir, "init"))
	if err != nil || !strings.Contains(string(init), "imgbuild-standin-initramfs") || !strings.Contains(string(init), "switch_root /sysroot /sbin/init") {
		t.Errorf("init: %v\n%s", err, init)
	}
	if st, err := os.Stat(filepath.Join(dir, "init")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("init mode: %v %v", st.Mode(), err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "bin/sh")); err != nil || l != "busybox" {
		t.Errorf("bin/sh -> %q, %v", l, err)
	}
}
