package vlab

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/labcluster/gpucluster/internal/testkit/ldd"
)

// The NFS test VM: the build machines' own kernel has no NFS, so live NFS checks boot the
// Debian kernel in QEMU, which has nfsd and the NFS client as modules, with an initramfs holding
// the host's real NFS userland (nfs-kernel-server, nfs-common, util-linux mount, iproute2) and
// their shared libraries. One VM plays several nodes: each is a network namespace named after
// the node, cabled to a bridge in the VM's own namespace, and sees its own rendered files in
// /etc, because `ip netns exec <node>` lays /etc/netns/<node>/* over /etc (in a mount namespace
// of its own). A node's daemons therefore read exactly the files bootd rendered for it.

// nfsModules are the modules the NFS VM loads, dependencies resolved from modules.dep: the NFS
// server, the v4 and v3 clients (mount.nfs negotiates; the kernel cannot autoload them, there is
// no modprobe in the image), veth and bridge for the nodes' network, ext4 on a virtio disk for
// the master's data disk (labelled LABDATA, mounted by the base layer's `bootd-node storage`),
// and overlay, to stand a netbooted master's root up again (an overlayfs, which nfsd cannot
// export, see overlays/README.md). ext4 finds its checksum through the crypto API, not
// modules.dep, so crc32c_generic is listed too.
var nfsModules = []string{"nfsd", "nfsv4", "nfsv3", "veth", "bridge", "crc32c_generic", "ext4", "virtio_blk", "virtio_pci", "overlay"}

// hostFile is a file the NFS image copies from the host, to the same path, and the Debian
// package that installs it (named in the error when it is missing).
type hostFile struct{ path, pkg string }

// nfsPrograms are the host programs the image carries with their libraries, at the paths Debian
// has them: mount.nfs under /sbin, where mount(8) looks for helpers. Scripts call ip and mount
// by full path (busybox's shell prefers its own applets of the same names). bash runs the base
// layer's bootd-node as Rocky's /bin/sh does, so the programs it calls come from PATH:
// util-linux blkid and mount, then busybox's applets (mkdir, chown, sed...).
var nfsPrograms = []hostFile{
	{"/usr/bin/bash", "bash"},
	{"/usr/sbin/blkid", "util-linux"},
	{"/usr/sbin/rpc.nfsd", "nfs-kernel-server"},
	{"/usr/sbin/rpc.mountd", "nfs-kernel-server"},
	{"/usr/sbin/exportfs", "nfs-kernel-server"},
	{"/usr/sbin/rpcbind", "rpcbind"},
	{"/sbin/mount.nfs", "nfs-common"},
	{"/usr/bin/mount", "mount"},
	{"/usr/sbin/ip", "iproute2"},
	{"/usr/bin/systemd-tmpfiles", "systemd"},
}

// nfsHostEtc are host files the NFS userland reads: libtirpc's transports (rpcbind and mountd
// fail without /etc/netconfig), RPC program names, services and protocols.
var nfsHostEtc = []hostFile{
	{"/etc/netconfig", "libtirpc-common"},
	{"/etc/rpc", "netbase"},
	{"/etc/services", "netbase"},
	{"/etc/protocols", "netbase"},
}

// nfsHostFiles lists every host file the NFS image copies: busybox, the programs and nfsHostEtc.
func nfsHostFiles() []hostFile {
	return slices.Concat([]hostFile{{busyboxPath, "busybox-static"}}, nfsPrograms, nfsHostEtc)
}

// checkNFSHost fails, naming the Debian packages, when one of files (the host files the NFS image
// copies: nfsHostFiles) is missing.
func checkNFSHost(files []hostFile) error {
	var missing []string
	for _, f := range files {
		if _, err := os.Stat(f.path); err != nil {
			missing = append(missing, fmt.Sprintf("%s (apt-get install %s)", f.path, f.pkg))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("vlab: the NFS image needs %s", strings.Join(missing, ", "))
	}
	return nil
}

// NFSFile is a file of the NFS image.
type NFSFile struct {
	Path string // absolute path in the image (for a node: under /etc)
	Mode fs.FileMode
	Data []byte
}

// NFSNode is one node the NFS VM plays.
type NFSNode struct {
	Name  string       // network namespace name, e.g. "master"
	Addr  netip.Prefix // address of its eth0, e.g. 10.80.0.100/24
	Files []NFSFile    // its own files, all under /etc (the rendered hosts, exports, fstab...)
}

// NFSImage describes the initramfs: the nodes, the scenario /init runs once they are up
// (/nfsvm/scenario, a shell script), and more files for the image root (accounts, scripts).
type NFSImage struct {
	Nodes    []NFSNode
	Scenario []byte
	Files    []NFSFile
}

// BuildNFSImage writes stageDir/vmlinuz (the installed Debian kernel) and stageDir/initramfs.img
// for img, and returns the kernel release. /init loads the NFS modules, starts syslogd (to
// /run/messages), makes the nodes' namespaces, prints NFSVM-NODE lines, runs the scenario with
// the nodes' names in $NFSVM_NODES, prints "NFSVM-SCENARIO-EXIT: <status>" (with the tails of
// syslog and dmesg when it failed) and powers off.
func BuildNFSImage(stageDir string, img NFSImage) (kernelRelease string, err error) {
	if err := checkNFSHost(nfsHostFiles()); err != nil {
		return "", err
	}
	return stageImage(stageDir, "nfs initramfs", func(release string) ([]cpioEntry, error) { return nfsEntries(release, img) })
}

// nfsEntries lists the whole initramfs.
func nfsEntries(release string, img NFSImage) ([]cpioEntry, error) {
	entries, err := busyboxEntries()
	if err != nil {
		return nil, err
	}
	mods, err := resolveModules(release, nfsModules)
	if err != nil {
		return nil, err
	}
	var nodes strings.Builder
	for _, n := range img.Nodes {
		fmt.Fprintf(&nodes, "%s %s\n", n.Name, n.Addr)
	}
	entries = append(entries, []cpioEntry{
		{Name: "init", Mode: modeFile | 0o755, Data: []byte(nfsInit)},
		{Name: "nfsvm/scenario", Mode: modeFile | 0o755, Data: img.Scenario},
		{Name: "etc/nfsvm/release", Mode: modeFile | 0o644, Data: []byte(release + "\n")},
		{Name: "etc/nfsvm/modules", Mode: modeFile | 0o644, Data: []byte(strings.Join(mods, "\n") + "\n")},
		{Name: "etc/nfsvm/nodes", Mode: modeFile | 0o644, Data: []byte(nodes.String())},
		// glibc reads only files: there is no DNS here, and the nodes' /etc/hosts is the point.
		{Name: "etc/nsswitch.conf", Mode: modeFile | 0o644, Data: []byte("passwd: files\ngroup: files\nshadow: files\nhosts: files\n")},
		{Name: "etc/mtab", Mode: modeSymlink | 0o777, Data: []byte("../proc/self/mounts")},
		// The kernel's rpcbind client and rpcbind itself use /var/run/rpcbind.sock.
		{Name: "var/run", Mode: modeSymlink | 0o777, Data: []byte("../run")},
	}...)
	modEntries, err := moduleEntries(release, mods)
	if err != nil {
		return nil, err
	}
	entries = append(entries, modEntries...)
	progs, err := programEntries(nfsPrograms)
	if err != nil {
		return nil, err
	}
	entries = append(entries, progs...)
	for _, f := range nfsHostEtc {
		data, err := os.ReadFile(f.path)
		if err != nil {
			return nil, err
		}
		entries = append(entries, cpioEntry{Name: strings.TrimPrefix(f.path, "/"), Mode: modeFile | 0o644, Data: data})
	}
	files := append([]NFSFile(nil), img.Files...)
	for _, n := range img.Nodes {
		nf, err := nodeEtc(n)
		if err != nil {
			return nil, err
		}
		files = append(files, nf...)
	}
	entries, err = addFiles(entries, files)
	if err != nil {
		return nil, err
	}
	return withParents(entries, "proc", "sys", "tmp", "run", "sbin", "usr/bin", "usr/sbin", "var/lib/nfs"), nil
}

// resolveModules returns the module files of names and their dependencies in load order,
// refusing compressed ones (busybox insmod reads plain .ko only).
func resolveModules(release string, names []string) ([]string, error) {
	f, err := os.Open(filepath.Join(modulesRoot, release, "modules.dep"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	md, err := parseModulesDep(f)
	if err != nil {
		return nil, err
	}
	files, err := md.resolve(names)
	if err != nil {
		return nil, err
	}
	for _, m := range files {
		if !strings.HasSuffix(m, ".ko") {
			return nil, fmt.Errorf("module %s is compressed; want uncompressed .ko", m)
		}
	}
	return files, nil
}

// nodeEtc places a node's files under /etc/netns/<node>/, and adds an empty placeholder in /etc
// for each top-level name they use: `ip netns exec` bind-mounts /etc/netns/<node>/<name> over
// /etc/<name> only when that exists.
func nodeEtc(n NFSNode) ([]NFSFile, error) {
	if n.Name == "" || strings.ContainsAny(n.Name, "/ ") {
		return nil, fmt.Errorf("node name %q", n.Name)
	}
	var out []NFSFile
	for _, f := range n.Files {
		rel, ok := strings.CutPrefix(path.Clean(f.Path), "/etc/")
		if !ok {
			return nil, fmt.Errorf("node %s: %s is not under /etc: only /etc is per node", n.Name, f.Path)
		}
		out = append(out, NFSFile{Path: path.Join("/etc/netns", n.Name, rel), Mode: f.Mode, Data: f.Data})
		top, rest, nested := strings.Cut(rel, "/")
		if nested && rest != "" {
			out = append(out, NFSFile{Path: "/etc/" + top, Mode: fs.ModeDir | 0o755})
		} else {
			out = append(out, NFSFile{Path: "/etc/" + top, Mode: 0o644})
		}
	}
	return out, nil
}

// addFiles adds files to entries; a path given twice must agree on its type (placeholders of
// several nodes meet in /etc), and the first one wins.
func addFiles(entries []cpioEntry, files []NFSFile) ([]cpioEntry, error) {
	have := map[string]uint32{}
	for _, e := range entries {
		have[e.Name] = e.Mode & 0o170000
	}
	for _, f := range files {
		name := strings.TrimPrefix(path.Clean(f.Path), "/")
		typ, perm := uint32(modeFile), uint32(f.Mode.Perm())
		if f.Mode.IsDir() {
			typ = modeDir
		}
		if t, ok := have[name]; ok {
			if t != typ {
				return nil, fmt.Errorf("%s given both as a file and as a directory", f.Path)
			}
			continue
		}
		have[name] = typ
		entries = append(entries, cpioEntry{Name: name, Mode: typ | perm, Data: f.Data})
	}
	return entries, nil
}

// programEntries copies host programs to the same paths in the image, with every shared library
// ldd finds (at the path ldd names, where the image's loader looks without an ld.so.cache) and
// the loader itself.
func programEntries(progs []hostFile) ([]cpioEntry, error) {
	files := map[string]bool{}
	for _, p := range progs {
		files[p.path] = true
		libs, err := ldd.Needs(p.path)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			files[lib] = true
		}
	}
	names := slices.Sorted(maps.Keys(files))
	var entries []cpioEntry
	for _, img := range names {
		// The file's content, not a symlink chain that would need its targets too.
		real, err := filepath.EvalSymlinks(img)
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(real)
		if err != nil {
			return nil, err
		}
		entries = append(entries, cpioEntry{Name: strings.TrimPrefix(img, "/"), Mode: modeFile | 0o755, Data: data})
	}
	return entries, nil
}

// NFSVMSpec is one boot of an NFS image.
type NFSVMSpec struct {
	ImageDir  string // vmlinuz and initramfs.img (BuildNFSImage)
	Disk      string // raw disk image attached as /dev/vda; "" for none
	Console   string // the serial console (ttyS0) goes here
	Log       string // QEMU's own output
	MemoryMiB int    // 0: 512
}

// RunNFSVM boots the image and waits until the VM powers off (or panics: panic=-1 with
// -no-reboot ends QEMU too). The VM has no network device, so nothing leaves it. When ctx ends
// first, QEMU is killed and waited for; RunNFSVM never leaves it running.
func RunNFSVM(ctx context.Context, spec NFSVMSpec) error {
	log, err := os.OpenFile(spec.Log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("vlab: qemu log: %w", err)
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", nfsQemuArgs(spec)...)
	cmd.Stdout, cmd.Stderr = log, log
	// As in Lab.Start: Pdeathsig so a test binary killed by its -timeout takes QEMU with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = cleanupTimeout
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("vlab: nfs vm still running: %w", ctx.Err())
		}
		return fmt.Errorf("vlab: nfs vm: qemu: %w", err)
	}
	return nil
}

// nfsQemuArgs: software emulation, no display, no network device (-nic none: QEMU's default
// would be a user-mode NIC with a way out), the serial console to a file.
func nfsQemuArgs(spec NFSVMSpec) []string {
	args := append(baseQemuArgs(spec.MemoryMiB, spec.Console), "-nic", "none",
		"-kernel", filepath.Join(spec.ImageDir, "vmlinuz"),
		"-initrd", filepath.Join(spec.ImageDir, "initramfs.img"),
		"-append", "console=ttyS0 quiet panic=-1")
	if spec.Disk != "" {
		args = append(args, "-drive", "file="+spec.Disk+",format=raw,if=virtio")
	}
	return args
}

// nfsInit is the NFS image's /init.
const nfsInit = `#!/bin/busybox sh
# /init of the NFS test VM: modules, one network namespace per node, the scenario, power off.
/bin/busybox --install -s
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# Debian's busybox shell runs its own applets before anything on PATH, so the real tools that
# share an applet's name (ip, mount) are called by their full path.
ip=/usr/sbin/ip
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/netns /run/rpcbind /tmp
echo "NFSVM-INIT: kernel $(uname -r)"

# Daemons log to syslog; a failed run prints the tail.
syslogd -O /run/messages

tails() {
	tail -n 40 /run/messages 2>/dev/null | sed 's/^/NFSVM-SYSLOG: /'
	dmesg | tail -n 20 | sed 's/^/NFSVM-DMESG: /'
}

fatal() {
	echo "NFSVM-FATAL: $*"
	tails
	sync
	poweroff -f
}

rel=$(cat /etc/nfsvm/release)
for m in $(cat /etc/nfsvm/modules); do
	insmod "/lib/modules/$rel/$m" || fatal "insmod $m"
done

$ip link add br0 type bridge || fatal "bridge"
$ip link set br0 up || fatal "bridge up"
i=0
NFSVM_NODES=
while read -r name addr; do
	$ip netns add "$name" || fatal "netns $name"
	$ip link add "v$i" type veth peer name eth0 netns "$name" || fatal "veth of $name"
	$ip link set "v$i" master br0 up || fatal "veth of $name on the bridge"
	$ip -n "$name" link set lo up || fatal "lo of $name"
	$ip -n "$name" addr add "$addr" dev eth0 || fatal "address of $name"
	$ip -n "$name" link set eth0 up || fatal "eth0 of $name"
	echo "NFSVM-NODE: $name $addr"
	NFSVM_NODES="$NFSVM_NODES $name"
	i=$((i + 1))
done < /etc/nfsvm/nodes
export NFSVM_NODES

sh /nfsvm/scenario
status=$?
echo "NFSVM-SCENARIO-EXIT: $status"
[ "$status" = 0 ] || tails
sync
poweroff -f
`
