package vlab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// DracutDebDir is where scripts/setup-debian.sh leaves the Debian packages of the real dracut
// (apt-get download: fetched, never installed; installing dracut would replace the host's
// initramfs-tools).
var DracutDebDir = "/var/cache/labcluster/debs"

// DracutPackages are the Debian 12 packages BuildDracutInitramfs unpacks: dracut 059 itself
// (dracut-core), its live-root modules (dracut-live: dmsquash-live, livenet) and network modules
// (dracut-network: network-legacy, network-manager), the two programs network-legacy insists on
// finding (dhclient, arping), and NetworkManager 1.42 with the libraries of it the host lacks
// (the network-manager module's), none of which the host otherwise needs.
var DracutPackages = []string{"dracut-core", "dracut-live", "dracut-network", "isc-dhcp-client", "iputils-arping",
	"network-manager", "libndp0", "libnm0", "libteamdctl0"}

// dracutHostTools are programs of the host that dracut copies into the initramfs for the modules
// DracutSpec asks for, with the Debian package to install when one is missing.
var dracutHostTools = map[string]string{
	"bash": "bash", "cpio": "cpio", "kmod": "kmod", "udevadm": "udev", "dmsetup": "dmsetup",
	"curl": "curl", "losetup": "mount", "blkid": "util-linux", "sha256sum": "coreutils",
	"unshare": "util-linux", "chroot": "coreutils", "dpkg-deb": "dpkg",
}

// dracutBuildTimeout bounds one dracut run (about 30 s on the test machines for network-legacy;
// one with systemd and NetworkManager took 4.5 min beside other test suites on two cores).
const dracutBuildTimeout = 10 * time.Minute

// DracutSpec is one initramfs built by the real dracut.
type DracutSpec struct {
	DebDir        string            // the .debs of DracutPackages; "" is DracutDebDir
	WorkDir       string            // scratch: the unpacked packages and dracut's log
	Output        string            // the initramfs to write
	KernelRelease string            // "" picks the installed kernel like BuildTestImage
	Modules       []string          // dracut -m: exactly these modules (and what they depend on)
	Drivers       []string          // dracut --add-drivers: kernel modules beyond the modules' own
	ExtraModules  map[string]string // modules.d/<name> -> a directory to copy there (a layer's module)
}

// DracutResult is what BuildDracutInitramfs made.
type DracutResult struct {
	KernelRelease string
	Kernel        string // /boot/vmlinuz-<release>
	Log           string // dracut's output
	Duration      time.Duration
}

// BuildDracutInitramfs builds an initramfs with the real dracut from Debian's packages without
// installing them: it unpacks them into spec.WorkDir and runs dracut chrooted into a private
// mount namespace whose /usr and /etc are read-only overlays of the unpacked packages on the
// host's /usr and /etc. To dracut it looks like a Debian 12 host with dracut installed: the
// kernel modules and programs it copies are the host's, at their usual paths. The host itself is
// not changed. It needs root and a merged-/usr host (Debian 12).
func BuildDracutInitramfs(ctx context.Context, spec DracutSpec) (DracutResult, error) {
	var res DracutResult
	if err := checkDracutHost(); err != nil {
		return res, err
	}
	debDir := spec.DebDir
	if debDir == "" {
		debDir = DracutDebDir
	}
	debs, err := findDebs(debDir, DracutPackages)
	if err != nil {
		return res, err
	}
	rel := spec.KernelRelease
	if rel == "" {
		if rel, err = findKernel(bootDir, modulesRoot, uname()); err != nil {
			return res, err
		}
	}
	res.KernelRelease, res.Kernel = rel, filepath.Join(bootDir, "vmlinuz-"+rel)
	if spec.WorkDir, err = filepath.Abs(spec.WorkDir); err != nil {
		return res, err
	}
	tree := filepath.Join(spec.WorkDir, "dracut-tree")
	if err := os.RemoveAll(tree); err != nil {
		return res, err
	}
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return res, err
	}
	for _, deb := range debs {
		if err := run(ctx, "dpkg-deb", "-x", deb, tree); err != nil {
			return res, fmt.Errorf("vlab: unpack %s: %w", filepath.Base(deb), err)
		}
	}
	if err := mergeUsr(tree); err != nil {
		return res, err
	}
	names := make([]string, 0, len(spec.ExtraModules))
	for name := range spec.ExtraModules {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		dst := filepath.Join(tree, "usr/lib/dracut/modules.d", name)
		if err := copyTree(spec.ExtraModules[name], dst); err != nil {
			return res, fmt.Errorf("vlab: dracut module %s: %w", name, err)
		}
	}
	out, err := filepath.Abs(spec.Output)
	if err != nil {
		return res, err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return res, err
	}
	chroot := filepath.Join(spec.WorkDir, "dracut-chroot")
	if err := os.MkdirAll(chroot, 0o755); err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(ctx, dracutBuildTimeout)
	defer cancel()
	args := []string{"--mount", "--propagation", "private", "sh", "-euc", dracutChrootScript, "dracut-chroot",
		tree, filepath.Dir(out), filepath.Base(out), rel, strings.Join(spec.Modules, " "), chroot, strings.Join(spec.Drivers, " ")}
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.WaitDelay = cleanupTimeout
	start := time.Now()
	b, err := cmd.CombinedOutput()
	res.Duration = time.Since(start)
	res.Log = string(b)
	_ = os.WriteFile(filepath.Join(spec.WorkDir, "dracut.log"), b, 0o644)
	if err != nil {
		return res, fmt.Errorf("vlab: dracut: %w; output tail:\n%s", err, LastLines(res.Log, 30))
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() == 0 {
		return res, fmt.Errorf("vlab: dracut wrote no %s; output tail:\n%s", out, LastLines(res.Log, 30))
	}
	return res, nil
}

// dracutChrootScript runs inside "unshare --mount": $1 the unpacked packages, $2 the output
// directory, $3 the output name, $4 the kernel release, $5 the dracut modules, $6 an empty
// directory to build the chroot on (a tmpfs mounted there), $7 extra kernel drivers. Nothing it mounts
// is visible outside the namespace, and everything goes with it.
const dracutChrootScript = `
tree=$1 outdir=$2 outname=$3 kver=$4 modules=$5 root=$6 drivers=$7
mount --make-rprivate /
mount -t tmpfs -o mode=0755 tmpfs "$root"
for d in usr etc; do
	mkdir "$root/$d"
	mount -t overlay overlay -o "ro,lowerdir=$tree/$d:/$d" "$root/$d"
done
for l in bin sbin lib lib64; do ln -s "usr/$l" "$root/$l"; done
mkdir -p "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/var/tmp" "$root/run" "$root/boot" "$root/out"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount --bind /boot "$root/boot"
mount --bind "$outdir" "$root/out"
chroot "$root" /usr/bin/dracut --no-hostonly --no-early-microcode --force --kver "$kver" \
	-m "$modules" --add-drivers "$drivers" "/out/$outname"
umount -R "$root"
`

// checkDracutHost fails, naming the Debian package, when a program dracut or the build needs is
// missing, and when /usr is not merged (the chroot links /bin, /sbin, /lib into /usr).
func checkDracutHost() error {
	var missing []string
	for tool, pkg := range dracutHostTools {
		if _, err := exec.LookPath(tool); err != nil {
			if _, err := os.Stat(filepath.Join("/usr/sbin", tool)); err != nil {
				missing = append(missing, fmt.Sprintf("%s (apt-get install %s)", tool, pkg))
			}
		}
	}
	if _, err := os.Stat("/usr/lib/systemd/systemd-udevd"); err != nil {
		missing = append(missing, "systemd-udevd (apt-get install udev)")
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("vlab: the real dracut needs %s", strings.Join(missing, ", "))
	}
	for _, d := range []string{"/bin", "/sbin", "/lib"} {
		if t, err := os.Readlink(d); err != nil || t != "usr"+d {
			return fmt.Errorf("vlab: the real dracut build needs a merged /usr (%s -> usr%s), as on Debian 12", d, d)
		}
	}
	return nil
}

// findDebs returns, for each package, its .deb in dir (the newest by name when several).
func findDebs(dir string, pkgs []string) ([]string, error) {
	var debs, missing []string
	for _, p := range pkgs {
		m, _ := filepath.Glob(filepath.Join(dir, p+"_*.deb"))
		if len(m) == 0 {
			missing = append(missing, p)
			continue
		}
		sort.Strings(m)
		debs = append(debs, m[len(m)-1])
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("vlab: no .deb of %s in %s: run scripts/setup-debian.sh, or (cd %s && apt-get download %s)",
			strings.Join(missing, ", "), dir, dir, strings.Join(missing, " "))
	}
	return debs, nil
}

// mergeUsr moves what packages ship under /bin, /sbin, /lib and /lib64 into /usr, the way a
// merged-/usr Debian 12 host sees those files.
func mergeUsr(tree string) error {
	for _, d := range []string{"bin", "sbin", "lib", "lib64"} {
		src := filepath.Join(tree, d)
		fi, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("vlab: unpacked packages: %s is not a directory", src)
		}
		if err := copyTree(src, filepath.Join(tree, "usr", d)); err != nil {
			return err
		}
		if err := os.RemoveAll(src); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies directory src into dst (created as needed): directories, regular files with
// their permission bits, and symbolic links.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			_ = os.Remove(target)
			return os.Symlink(link, target)
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.WriteFile(target, b, info.Mode().Perm()); err != nil {
				return err
			}
			return os.Chmod(target, info.Mode().Perm())
		}
		return fmt.Errorf("vlab: copy %s: unsupported file type %v", p, info.Mode().Type())
	})
}
