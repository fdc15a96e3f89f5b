package testrepo

import (
	"bufio"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/labcluster/gpucluster/internal/testkit/ldd"
)

// The stand-ins that make an image boot from the network the way a Rocky node does: the
// kernel's modules for a netboot, dracut's live netroot in the initramfs (stand-in dracut),
// systemd running the enabled oneshot units (the node's side of bootd among them), a real curl,
// and a slurmd that answers -C.

// NetbootModules are the modules a netbooted node's initramfs loads: the lab's NICs (e1000 for
// BIOS PCs, virtio-net with its PCI transport for UEFI ones), and squashfs, loop and overlay for
// the live root. kernel-core ships them and their dependencies with a modules.dep.
var NetbootModules = []string{"e1000", "virtio_net", "virtio_pci", "squashfs", "loop", "overlay"}

// kernelModules reads the host's modules.dep and returns the files of NetbootModules with
// everything they depend on (paths relative to /lib/modules/<release>), dependencies first, and
// the modules.dep lines for exactly those files. Modules built into the kernel (not in
// modules.dep) are left out: nothing to load. It returns nothing when the host has no modules.
func kernelModules(k KernelFiles) (files []string, dep string, err error) {
	if k.ModulesDir == "" {
		return nil, "", nil
	}
	f, err := os.Open(filepath.Join(k.ModulesDir, "modules.dep"))
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	byName := map[string]string{}
	deps := map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		file, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		file = strings.TrimSpace(file)
		byName[moduleName(file)] = file
		deps[file] = strings.Fields(rest)
	}
	if err := sc.Err(); err != nil {
		return nil, "", err
	}
	done := map[string]bool{}
	var visit func(string)
	visit = func(file string) {
		if done[file] {
			return
		}
		done[file] = true
		for _, d := range deps[file] {
			visit(d)
		}
		files = append(files, file)
	}
	for _, m := range NetbootModules {
		if file, ok := byName[m]; ok {
			visit(file)
		}
	}
	var b strings.Builder
	for _, file := range files {
		fmt.Fprintf(&b, "%s:", file)
		for _, d := range deps[file] {
			fmt.Fprintf(&b, " %s", d)
		}
		b.WriteString("\n")
	}
	return files, b.String(), nil
}

// moduleName is the name modprobe knows a module file by.
func moduleName(file string) string {
	base := path.Base(file)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// addKernelModules puts the netboot modules and their modules.dep into kernel-core, where
// Rocky's kernel-core (and kernel-modules-core) has them. An unreadable modules.dep leaves the
// empty one: the image then cannot netboot, which its boot says.
func addKernelModules(p *Package, k KernelFiles) {
	files, dep, err := kernelModules(k)
	if err != nil || len(files) == 0 {
		return
	}
	mod := "/lib/modules/" + k.Release
	if p.Modes == nil {
		p.Modes = map[string]fs.FileMode{}
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(k.ModulesDir, f))
		if err != nil {
			return
		}
		p.Files[mod+"/"+f] = string(data)
		p.Modes[mod+"/"+f] = 0o644
	}
	p.Files[mod+"/modules.dep"] = dep
}

// curlPkg ships the host's curl (hostClosure), so the real curl runs inside the image:
// bootd-node needs --local-port, which busybox wget lacks. Without a host curl the stand-in is
// the usual marker package.
func curlPkg() Package {
	p := Package{Name: "curl", Version: "7.76.1", Release: "29.el9", Arch: "x86_64", Requires: []string{"filesystem"}}
	bins, err := hostClosure("/usr/bin/curl", "/usr/bin")
	if err != nil {
		return markerOnly(p, "no host curl: "+err.Error())
	}
	p.Binaries = bins
	return p
}

// shadowUtilsPkg ships the host's useradd, groupadd, usermod and userdel (hostClosure) and its
// login.defs: bootd-node makes the lab's users with them. Without them the stand-in is the usual
// marker package.
func shadowUtilsPkg() Package {
	p := Package{Name: "shadow-utils", Version: "4.9", Release: "12.el9", Arch: "x86_64", Requires: []string{"filesystem"}}
	defs, err := os.ReadFile("/etc/login.defs")
	if err != nil {
		return markerOnly(p, "no host login.defs: "+err.Error())
	}
	all := map[string]string{}
	for _, tool := range []string{"useradd", "groupadd", "usermod", "userdel"} {
		bins, err := hostClosure("/usr/sbin/"+tool, "/usr/sbin")
		if err != nil {
			return markerOnly(p, "no host "+tool+": "+err.Error())
		}
		maps.Copy(all, bins)
	}
	p.Binaries = all
	p.Files = map[string]string{"/etc/login.defs": string(defs)}
	return p
}

// TPMTools are the tpm2-tools commands bootd-node runs: the stand-in links each to the host's
// multi-call tpm2 binary, as Debian's and Rocky's packages do.
var TPMTools = []string{"tpm2_createek", "tpm2_createak", "tpm2_flushcontext", "tpm2_startauthsession",
	"tpm2_policysecret", "tpm2_activatecredential", "tpm2_readpublic"}

// tpmDeviceTCTI is the library tpm2-tools loads (dlopen, so ldd does not list it) to reach a TPM
// through /dev/tpmrm0.
const tpmDeviceTCTI = "/usr/lib/x86_64-linux-gnu/libtss2-tcti-device.so.0"

// tpm2ToolsPkg ships the host's tpm2-tools (hostClosure) with its device TCTI: a node with a TPM
// opens its sealed overlay with them. Without them the stand-in is the usual marker package.
func tpm2ToolsPkg() Package {
	p := Package{Name: "tpm2-tools", Version: "5.2", Release: "3.el9", Arch: "x86_64", Requires: []string{"filesystem"}}
	bins, err := hostClosure("/usr/bin/tpm2", "/usr/bin")
	if err != nil {
		return markerOnly(p, "no host tpm2-tools: "+err.Error())
	}
	tcti, err := hostClosure(tpmDeviceTCTI, "/usr/lib/x86_64-linux-gnu")
	if err != nil {
		return markerOnly(p, "no host tpm2 device TCTI: "+err.Error())
	}
	maps.Copy(bins, tcti)
	p.Binaries = bins
	p.Symlinks = map[string]string{}
	for _, tool := range TPMTools {
		p.Symlinks["/usr/bin/"+tool] = "tpm2"
	}
	return p
}

// opensslPkg ships the host's openssl (hostClosure): bootd-node decrypts a sealed overlay with it.
func opensslPkg() Package {
	p := Package{Name: "openssl", Version: "3.0.7", Release: "27.el9", Arch: "x86_64", Requires: []string{"filesystem"}}
	bins, err := hostClosure("/usr/bin/openssl", "/usr/bin")
	if err != nil {
		return markerOnly(p, "no host openssl: "+err.Error())
	}
	p.Binaries = bins
	return p
}

// markerOnly is p with only a marker file saying why it lacks its real content.
func markerOnly(p Package, why string) Package {
	p.Files = map[string]string{"/usr/share/standin/" + p.Name: p.Name + " (" + why + ")\n"}
	return p
}

// hostClosure maps image paths to host files for a dynamically linked program (put in binDir)
// with its shared library closure (as ldd resolves it) and the dynamic loader, so the host's
// program runs inside the image. Libraries go to /usr/lib/x86_64-linux-gnu, where the host's
// loader looks without an ld.so.cache; the loader to /usr/lib64 (/lib64 in the ELF header).
// Programs that share libraries ship identical files, which rpm allows.
func hostClosure(prog, binDir string) (map[string]string, error) {
	if _, err := os.Stat(prog); err != nil {
		return nil, err
	}
	libs, err := ldd.Needs(prog)
	if err != nil {
		return nil, err
	}
	bins := map[string]string{path.Join(binDir, filepath.Base(prog)): prog}
	for _, lib := range libs {
		if strings.Contains(filepath.Base(lib), "ld-linux") {
			// The loader, at the path the ELF header names.
			bins["/usr/lib64/"+filepath.Base(lib)] = lib
		} else {
			bins["/usr/lib/x86_64-linux-gnu/"+filepath.Base(lib)] = lib
		}
	}
	// Hard links by host path in stageBinaries need the real file, not a symlink chain.
	for k, v := range bins {
		if r, err := filepath.EvalSymlinks(v); err == nil {
			bins[k] = r
		}
	}
	return bins, nil
}

// systemdScript is the stand-in systemd (PID 1 after the initramfs's switch_root). It does, in
// order, what the real one does with the units a built image enables: mount the API file
// systems if the initramfs did not hand them over, set the hostname from /etc/hostname, then
// start sysinit.target's units and multi-user.target's. Only oneshot services run (their
// ExecStart= lines in order, the unit failing at the first failing line, as systemd does): that
// is the node's side of bootd (bootd-overlay, bootd-report); the daemons' stand-in units are not
// started. Then it prints what the boot achieved as NODEBOOT-* lines and powers off.
const systemdScript = `#!/bin/sh
# Stand-in systemd for netboot tests: runs the enabled oneshot units, reports, powers off.
bb=/usr/bin/busybox
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin
# The kernel's own console messages would cut into the report lines, which the tests read whole.
$bb dmesg -n 1
echo "NODEBOOT-INIT: stand-in systemd as PID $$"
$bb grep -q ' /proc ' /proc/mounts 2>/dev/null || $bb mount -t proc proc /proc
$bb grep -q ' /sys ' /proc/mounts || $bb mount -t sysfs sysfs /sys
$bb grep -q ' /dev ' /proc/mounts || $bb mount -t devtmpfs devtmpfs /dev
$bb grep -q ' /run ' /proc/mounts || $bb mount -t tmpfs -o mode=0755 tmpfs /run
[ -s /etc/hostname ] && $bb hostname -F /etc/hostname
# A PC whose chassis asset tag is ImpatientAssetTag is meant to be refused: its bootd-node gives
# up after 3 tries a second apart, not 10 three seconds apart.
if [ "$(cat /sys/class/dmi/id/chassis_asset_tag 2>/dev/null)" = "` + ImpatientAssetTag + `" ]; then
	export BOOTD_NODE_FETCH_TRIES=3 BOOTD_NODE_FETCH_PAUSE=1
fi

# took T0: seconds since uptime T0, one decimal.
took() {
	$bb awk -v t0="$1" '{ printf "%.1f", $1 - t0 }' /proc/uptime
}

# run_units TARGET: the oneshot services TARGET wants, in name order.
run_units() {
	for u in /etc/systemd/system/$1.target.wants/*.service; do
		[ -e "$u" ] || continue
		name=${u##*/}
		if ! $bb grep -q '^Type=oneshot' "$u"; then
			echo "NODEBOOT-UNIT: $name not started (the stand-in runs oneshot units only)"
			continue
		fi
		$bb sed -n 's/^ExecStart=-\{0,1\}//p' "$u" > /run/standin-exec
		status=ok
		while read -r cmd; do
			t0=$($bb cut -d' ' -f1 /proc/uptime)
			if $cmd </dev/null; then
				echo "NODEBOOT-EXEC: $name: $cmd: ok in $(took "$t0")s"
			else
				echo "NODEBOOT-EXEC: $name: $cmd: failed with status $? in $(took "$t0")s"
				status=failed
				break
			fi
		done < /run/standin-exec
		echo "NODEBOOT-UNIT: $name $status"
	done
}
run_units sysinit
run_units multi-user

# What the boot achieved.
mac= iface=
for arg in $(cat /proc/cmdline); do
	case "$arg" in BOOTIF=01-*) mac=$(echo "${arg#BOOTIF=01-}" | tr 'A-F-' 'a-f:') ;; esac
done
for d in /sys/class/net/*; do
	[ "$(cat "$d/address" 2>/dev/null)" = "$mac" ] && iface=${d##*/}
done
echo "NODEBOOT-HOSTNAME: $($bb hostname) (/etc/hostname: $(cat /etc/hostname 2>/dev/null))"
echo "NODEBOOT-IP: $iface $($bb ip -4 -o addr show dev "$iface" 2>/dev/null | $bb awk '{print $4}')"
if [ -e /etc/munge/munge.key ]; then
	echo "NODEBOOT-MUNGE-KEY: mode $($bb stat -c '%a owner %u:%g' /etc/munge/munge.key)"
else
	echo "NODEBOOT-MUNGE-KEY: missing"
fi
if [ -s /etc/ssh/ssh_host_ed25519_key ]; then
	echo "NODEBOOT-SSH-HOST-KEY: present"
else
	echo "NODEBOOT-SSH-HOST-KEY: missing"
fi
# The lab's users (bootd's /etc/bootd/users) as bootd-node left them.
$bb grep -v '^#' /etc/bootd/users 2>/dev/null | while IFS=: read -r name _; do
	[ -n "$name" ] || continue
	echo "NODEBOOT-USER: $($bb grep "^$name:" /etc/passwd) group $($bb grep "^$name:" /etc/group)" \
		"subuid $($bb grep "^$name:" /etc/subuid) subgid $($bb grep "^$name:" /etc/subgid)"
	$bb sed "s/^/NODEBOOT-USER-KEY: $name /" "/etc/ssh/authorized_keys.d/$name" 2>/dev/null
done
sq=/run/initramfs/live/rootfs.squashfs
size=$($bb stat -c %s "$sq" 2>/dev/null || echo 0)
total=$($bb sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)
avail=$($bb sed -n 's/^MemAvailable: *\([0-9]*\) kB/\1/p' /proc/meminfo)
upper=$($bb du -sk /run/overlayfs 2>/dev/null | $bb awk '{print $1}')
echo "NODEBOOT-ROOTFS-RAM: squashfs $size bytes in tmpfs /run, overlay upper ${upper:-0} kB, MemTotal $total kB, MemAvailable $avail kB"
if [ -c /dev/tpmrm0 ]; then echo "NODEBOOT-TPM: /dev/tpmrm0"; else echo "NODEBOOT-TPM: none"; fi
echo "NODEBOOT-DONE"
$bb sync
# A PC whose chassis asset tag is HoldAssetTag stays up, silent on the network, until the test
# stops it: the node is up while another machine copies its MAC and address.
if [ "$(cat /sys/class/dmi/id/chassis_asset_tag 2>/dev/null)" = "` + HoldAssetTag + `" ]; then
	echo "NODEBOOT-HOLD: up until the test stops this PC"
	i=0
	while [ $i -lt 1800 ]; do $bb sleep 1; i=$((i + 1)); done
fi
exec $bb poweroff -f
`

// HoldAssetTag is the chassis asset tag (SMBIOS type 3, vlab.VMSpec.AssetTag) that keeps a PC
// booted with the stand-in systemd up after its report, instead of powering off.
const HoldAssetTag = "vlab-hold"

// ImpatientAssetTag is the chassis asset tag of a PC meant to be refused (an impostor): the
// stand-in systemd has its bootd-node give up sooner (BOOTD_NODE_FETCH_TRIES and _PAUSE).
const ImpatientAssetTag = "vlab-impatient"

// systemdPkg is the stand-in systemd: the script above as /usr/lib/systemd/systemd and
// /usr/sbin/init pointing at it, as in Rocky.
func systemdPkg() Package {
	return Package{
		Name: "systemd", Version: "252", Release: "51.el9", Arch: "x86_64",
		Requires: []string{"filesystem", "bash"},
		Files:    map[string]string{"/usr/lib/systemd/systemd": systemdScript},
		Symlinks: map[string]string{"/usr/sbin/init": "../lib/systemd/systemd"},
	}
}

// slurmdScript answers `slurmd -C` as slurmd does (its first line is what bootd-node reports):
// CPUs from /proc/cpuinfo as one socket of single-thread cores, RealMemory as MemTotal in MiB.
// Real slurmd reads the topology with hwloc and can report sockets and threads the stand-in
// does not.
const slurmdScript = `#!/bin/sh
# stand-in slurmd: only -C (print this node's configuration), as bootd-node's report uses it.
if [ "${1:-}" != -C ]; then
	echo "stand-in slurmd: only -C is implemented" >&2
	exit 1
fi
[ -r /proc/cpuinfo ] && [ -r /proc/meminfo ] || { echo "slurmd: cannot read /proc" >&2; exit 1; }
cpus=$(grep -c '^processor' /proc/cpuinfo)
mem=$(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)
up=$(cut -d. -f1 /proc/uptime)
echo "NodeName=$(hostname) CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=$((mem / 1024))"
printf 'UpTime=%d-%02d:%02d:%02d\n' $((up / 86400)) $((up % 86400 / 3600)) $((up % 3600 / 60)) $((up % 60))
`

func slurmdPkg() Package {
	return Package{
		Name: "slurm-slurmd-ohpc", Version: "23.11.10", Release: "1.3.1.ohpc", Arch: "x86_64",
		Requires: []string{"filesystem", "bash"},
		Files:    map[string]string{"/usr/sbin/slurmd": slurmdScript, "/usr/share/standin/slurm-slurmd-ohpc": "slurm-slurmd-ohpc\n"},
		Units:    unitsFor("slurm-slurmd-ohpc"),
	}
}

// slurmPkg is slurm-ohpc with the one file the slurm layer checks for: the cgroup/v2 plugin,
// which OpenHPC's build has (its spec requires dbus-devel for it).
func slurmPkg() Package {
	return Package{
		Name: "slurm-ohpc", Version: "23.11.10", Release: "1.3.1.ohpc", Arch: "x86_64",
		Requires: []string{"filesystem"},
		Files:    map[string]string{"/usr/lib64/slurm/cgroup_v2.so": "stand-in cgroup/v2 plugin\n"},
	}
}

// policycoreutilsPkg ships the host's setfiles (hostClosure): imgbuild labels the image's tree
// with the image's own setfiles. Without it the stand-in is the usual marker package.
func policycoreutilsPkg() Package {
	p := Package{Name: "policycoreutils", Version: "3.6", Release: "2.1.el9", Arch: "x86_64", Requires: []string{"filesystem"}}
	bins, err := hostClosure("/usr/sbin/setfiles", "/usr/sbin")
	if err != nil {
		return markerOnly(p, "no host setfiles: "+err.Error())
	}
	p.Binaries = bins
	return p
}

// SELinuxContexts is the stand-in targeted policy's file_contexts: a few of the real policy's
// types, in its format, so a labelled image shows which rule labelled a file.
const SELinuxContexts = "/.*\tsystem_u:object_r:default_t:s0\n" +
	"/etc(/.*)?\tsystem_u:object_r:etc_t:s0\n" +
	"/usr/(s)?bin(/.*)?\tsystem_u:object_r:bin_t:s0\n" +
	"/usr/libexec(/.*)?\tsystem_u:object_r:bin_t:s0\n" +
	"/usr/lib/systemd/systemd\tsystem_u:object_r:init_exec_t:s0\n"

// selinuxPolicyPkg is selinux-policy-targeted: its file_contexts and the /etc/selinux/config the
// real package ships (enforcing; the base layer writes its own).
func selinuxPolicyPkg() Package {
	return Package{
		Name: "selinux-policy-targeted", Version: "38.1.45", Release: "3.el9", Requires: []string{"filesystem"},
		Files: map[string]string{
			"/etc/selinux/config":                                "SELINUX=enforcing\nSELINUXTYPE=targeted\n",
			"/etc/selinux/targeted/contexts/files/file_contexts": SELinuxContexts,
		},
	}
}
