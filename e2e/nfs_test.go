//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/bootd"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// nfsCompute is the compute of the NFS test; the master is the configuration's.
const nfsCompute = "c1"

// nfsNodeFiles are the rendered files the NFS test gives its nodes: the NFS configuration, the
// names it uses, the tmpfiles.d lines for the exported directories, and node.env (the role, which
// bootd-node storage reads).
var nfsNodeFiles = []string{"/etc/exports", "/etc/bootd/fstab", "/etc/hosts", "/etc/tmpfiles.d/bootd.conf", "/etc/bootd/node.env"}

// bootdNode is the base layer's node script, whose storage step makes the master's trees.
const bootdNode = "../layers/files/base/bootd/bootd-node"

// nfsDataLabel is the label bootd-node storage looks for by default.
const nfsDataLabel = "LABDATA"

// TestNFSLive proves the NFS files bootd renders with the real Linux NFS server and client. The
// build machines' kernel has no NFS, so one QEMU VM boots the Debian kernel (nfsd and the NFS
// client are modules there) with the host's nfs-kernel-server, nfs-common and util-linux mount,
// and plays the master and c1 as network namespaces, each seeing its own rendered /etc. The
// master's /home, /opt/software and /var/spool/slurmctld come from the base layer's real
// `bootd-node storage` (what bootd-storage.service runs), run twice, which binds them from the
// ext4 disk labelled LABDATA; the rendered tmpfiles.d lines are applied after it, as at boot,
// and exportfs -ra serves the rendered /etc/exports; c1 mounts them with `mount -a -t nfs` from
// its rendered /etc/bootd/fstab (the block bootd-node adds to /etc/fstab), finding "master" in
// its rendered /etc/hosts. Then: a user's file made
// on c1 belongs to that user on the master, root on c1 is squashed to nobody (cannot write root's
// trees, and what it drops in a world-writable directory is nobody's), and a module file the
// master installs is readable on c1. Last, the master without its disk on a root like a
// netbooted one (an overlayfs): exportfs refuses /home there, and after bootd-node storage
// (tmpfs, with its warning) exports both trees.
func TestNFSLive(t *testing.T) {
	requirePrereqs(t, "qemu-system-x86_64", "ldd", "mkfs.ext4")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	dir := artifactDir(t)
	r := labRenderer(t, dir)
	master := r.Config.Master.Name
	inv := assigned(t, r.Config, master, nfsCompute)
	nodes := []vlab.NFSNode{nfsNode(t, r, inv, master, "/etc/exports", "/etc/tmpfiles.d/bootd.conf", "/etc/bootd/node.env"), nfsNode(t, r, inv, nfsCompute, "/etc/bootd/fstab")}
	script, err := os.ReadFile(bootdNode)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		for _, f := range n.Files {
			if f.Path == "/etc/exports" || f.Path == "/etc/bootd/fstab" {
				t.Logf("%s's rendered %s:\n%s", n.Name, f.Path, f.Data)
			}
		}
	}

	start := time.Now()
	imageDir := filepath.Join(dir, "image")
	release, err := vlab.BuildNFSImage(imageDir, vlab.NFSImage{
		Nodes:    nodes,
		Scenario: []byte(fmt.Sprintf("MASTER=%s\nCOMPUTE=%s\n%s", master, nfsCompute, nfsScenario)),
		Files:    append([]vlab.NFSFile{{Path: "/usr/libexec/bootd-node", Mode: 0o755, Data: script}}, nfsAccounts...),
	})
	if err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(dir, "master-disk.img")
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", nfsDataLabel, disk, "64M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v\n%s", disk, err, out)
	}
	built := time.Since(start)

	console := filepath.Join(dir, "nfs.console")
	vmCtx, vmCancel := context.WithTimeout(ctx, 2*bootLimit)
	defer vmCancel()
	booted := time.Now()
	runErr := vlab.RunNFSVM(vmCtx, vlab.NFSVMSpec{ImageDir: imageDir, Disk: disk, Console: console, Log: filepath.Join(dir, "nfs.qemu.log")})
	ran := time.Since(booted)
	b, _ := os.ReadFile(console)
	out := strings.ReplaceAll(string(b), "\r", "")
	defer func() {
		if t.Failed() {
			t.Logf("console of the NFS VM (tail):\n%s", vlab.LastLines(out, 80))
			logTailOnFailure(t, filepath.Join(dir, "nfs.qemu.log"))
		}
	}()
	if runErr != nil {
		t.Fatal(runErr)
	}

	checkNFSConsole(t, out, r, inv)
	t.Logf("NFS VM markers:\n%s", nfsMarkers(out))
	t.Logf("FIGURES (TCG, 1 vCPU, kernel %s): image and disk built in %s, VM power on to power off %s; %s",
		release, built.Round(100*time.Millisecond), ran.Round(100*time.Millisecond), nfsPhases(out))
}

// nfsNode renders node name's files and keeps those the NFS test uses; must lists the files its
// role must have been given.
func nfsNode(t *testing.T, r bootd.Renderer, inv []inventory.Node, name string, must ...string) vlab.NFSNode {
	t.Helper()
	nf := render(t, r, inv, name)
	n := vlab.NFSNode{Name: name, Addr: nf.Addr}
	for _, f := range nf.Files {
		if slices.Contains(nfsNodeFiles, f.Path) {
			n.Files = append(n.Files, vlab.NFSFile{Path: f.Path, Mode: f.Mode, Data: f.Data})
		}
	}
	for _, p := range must {
		if !slices.ContainsFunc(n.Files, func(f vlab.NFSFile) bool { return f.Path == p }) {
			t.Fatalf("bootd rendered no %s for %s", p, name)
		}
	}
	return n
}

// checkNFSConsole checks the VM's report: the scenario ran to the end without a failed check,
// every check passed, the live exports are the rendered ones with their options, and c1 mounted
// both shares from the master's address, which only its /etc/hosts could have given.
func checkNFSConsole(t *testing.T, out string, r bootd.Renderer, inv []inventory.Node) {
	t.Helper()
	if m := regexp.MustCompile(`(?m)^.*(NFSTEST-FAIL|NFSTEST-FATAL|NFSVM-FATAL).*$`).FindAllString(out, -1); m != nil {
		t.Errorf("the NFS VM reported failures:\n%s", strings.Join(m, "\n"))
	}
	if !strings.Contains(out, "NFSVM-SCENARIO-EXIT: 0\n") {
		t.Errorf("the NFS scenario did not end with status 0")
	}
	master := r.Config.Master.Name
	for _, id := range nfsChecks(master, nfsCompute) {
		if !regexp.MustCompile(`(?m)^NFSTEST \[[0-9.]+\] ok ` + regexp.QuoteMeta(id) + `(:|$)`).MatchString(out) {
			t.Errorf("no passed check %q on the console", id)
		}
	}

	// exportfs -s on the master: each rendered export, to the subnet, rw, sync, root_squash.
	subnet := r.Config.Network.Subnet.String()
	exports := regexp.MustCompile(`(?m)^NFSTEST \[[0-9.]+\] `+regexp.QuoteMeta(master)+` export: (\S+)\s+(\S+)\((\S+)\)$`).FindAllStringSubmatch(out, -1)
	for _, path := range []string{"/home", "/opt/software"} {
		i := slices.IndexFunc(exports, func(m []string) bool { return m[1] == path })
		if i < 0 {
			t.Errorf("the master does not export %s (exportfs -s: %q)", path, exports)
			continue
		}
		opts := strings.Split(exports[i][3], ",")
		if exports[i][2] != subnet || !slices.Contains(opts, "rw") || !slices.Contains(opts, "sync") || !slices.Contains(opts, "root_squash") {
			t.Errorf("live export %s to %s (%s), want to %s with rw, sync, root_squash", path, exports[i][2], exports[i][3], subnet)
		}
	}

	// /proc/mounts on c1: both shares from master's address, as its fstab says.
	var masterAddr, c1Addr string
	for _, n := range inv {
		switch n.Name {
		case master:
			masterAddr = n.Address.String()
		case nfsCompute:
			c1Addr = n.Address.String()
		}
	}
	mounts := regexp.MustCompile(`(?m)^NFSTEST \[[0-9.]+\] `+regexp.QuoteMeta(nfsCompute)+` mount: (\S+) (\S+) (\S+) (\S+)$`).FindAllStringSubmatch(out, -1)
	for _, path := range []string{"/home", "/opt/software"} {
		i := slices.IndexFunc(mounts, func(m []string) bool { return m[2] == path })
		if i < 0 {
			t.Errorf("%s has nothing mounted on %s (%q)", nfsCompute, path, mounts)
			continue
		}
		m := mounts[i]
		opts := strings.Split(m[4], ",")
		if m[1] != master+":"+path || !strings.HasPrefix(m[3], "nfs") || !slices.Contains(opts, "addr="+masterAddr) {
			t.Errorf("%s mounted %s %s %s; want %s:%s over NFS from addr=%s", nfsCompute, m[1], m[2], m[3], master, path, masterAddr)
		}
		if m[3] == "nfs4" && !slices.Contains(opts, "clientaddr="+c1Addr) {
			t.Errorf("%s's NFSv4 mount of %s uses clientaddr other than its own %s: %s", nfsCompute, path, c1Addr, m[4])
		}
		t.Logf("%s: %s on %s type %s, %s", nfsCompute, m[1], m[2], m[3], nfsVersion(opts))
	}
}

// nfsChecks are the checks the scenario must report passed.
func nfsChecks(master, compute string) []string {
	return []string{
		master + " storage: /home from the " + nfsDataLabel + " disk",
		master + " storage: /opt/software from the " + nfsDataLabel + " disk",
		master + " storage: /var/spool/slurmctld from the " + nfsDataLabel + " disk",
		master + " storage: /var/spool/slurmctld owner and mode",
		master + " storage: /opt/software/modules/all",
		master + " storage: no warning",
		master + " serving",
		compute + " mounted /home",
		compute + " mounted /opt/software",
		compute + " alice writes her home",
		compute + " alice's file owner",
		compute + " alice reads the master's module file",
		compute + " root cannot write /opt/software",
		compute + " root cannot read a root-only file",
		compute + " root cannot list alice's home",
		compute + " root's file in a world-writable directory, owner",
		master + " alice's file from " + compute + ", owner",
		master + " alice's file from " + compute + ", content",
		master + " root's file from " + compute + ", owner",
		master + " nothing of " + compute + "'s root in /opt/software",
		"nodisk exportfs refuses /home on the overlay root",
		"nodisk exportfs refuses /opt/software on the overlay root",
		"nodisk storage: /home on tmpfs",
		"nodisk storage: /opt/software on tmpfs",
		"nodisk storage: warning with the command",
		"nodisk exportfs -ra",
		"nodisk exports /home",
		"nodisk exports /opt/software",
	}
}

func nfsVersion(opts []string) string {
	for _, o := range opts {
		if strings.HasPrefix(o, "vers=") {
			return o
		}
	}
	return "vers=?"
}

// nfsPhases reads the scenario's uptime stamps: kernel boot to scenario start, the master's
// server coming up, c1's mounts, and the end.
func nfsPhases(out string) string {
	at := func(re string) float64 {
		m := regexp.MustCompile(`(?m)^NFSTEST \[([0-9.]+)\] ` + re).FindStringSubmatch(out)
		if m == nil {
			return -1
		}
		f, _ := strconv.ParseFloat(m[1], 64)
		return f
	}
	// The first write waits out nfsd's NFSv4 grace period (10 s here).
	return fmt.Sprintf("VM uptime: scenario start %.1fs, master storage %.1fs, serving %.1fs, %s mounted %.1fs, first write %.1fs, checks %.1fs, no-disk checks done %.1fs",
		at(`start`), at(`ok \S+ storage: no warning`), at(`ok \S+ serving`), nfsCompute, at(`ok \S+ mounted /opt/software`), at(`ok \S+ alice writes her home`),
		at(`ok \S+ nothing of`), at(`done`))
}

func nfsMarkers(out string) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "NFSTEST") || strings.HasPrefix(l, "NFSVM") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// nfsAccounts are the image's accounts, the same on every node as on a real cluster: root,
// rpcbind's user (Debian's rpcbind drops to it), nobody (what root_squash maps root to), slurm
// (the slurm layer's fixed id, owner of slurmctld's state) and a user with a home on the master.
var nfsAccounts = []vlab.NFSFile{
	{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\n_rpc:x:106:65534::/run/rpcbind:/bin/false\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\nslurm:x:901:901:Slurm:/var/lib/slurm:/bin/false\n" +
		"alice:x:1000:1000:alice:/home/alice:/bin/sh\n")},
	{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnogroup:x:65534:\nslurm:x:901:\nalice:x:1000:\n")},
}

// nfsScenario is run by the NFS VM's /init with MASTER and COMPUTE set, and runs itself inside
// the nodes: "serve" in the master's namespaces (`ip netns exec`: its own /etc), "client" in the
// compute's, "check" back in the master's, entered through rpc.mountd's namespaces, which hold
// the master's disk mounts, and "nodisk" in a namespace of its own. Every line it reports starts
// with NFSTEST and the VM's uptime. Debian's busybox shell prefers its applets to programs on
// PATH: util-linux mount (which runs /sbin/mount.nfs) and iproute2's ip (netns) are called by
// full path, and bootd-node runs under bash, as Rocky's /bin/sh.
const nfsScenario = `
up() { cut -d' ' -f1 /proc/uptime; }
say() { echo "NFSTEST [$(up)] $*"; }
ok() { say "ok $*"; }
failed=0
fail() { echo "NFSTEST-FAIL [$(up)] $*"; failed=1; }
fatal() { echo "NFSTEST-FATAL [$(up)] $*"; exit 1; }
# expect CHECK WANT GOT
expect() {
	if [ "$2" = "$3" ]; then ok "$1: $3"; else fail "$1: got '$3', want '$2'"; fi
}
# refused CHECK COMMAND...: the command must fail.
refused() {
	c=$1
	shift
	if "$@" >/dev/null 2>&1; then fail "$c: $* succeeded"; else ok "$c"; fi
}
as_alice() { su -s /bin/sh -c "$1" alice; }
module=/opt/software/modules/all/hello/1.0.lua
module_text='whatis("hello from the master")'

# tmpfiles EXPORT...: the rendered tmpfiles.d lines for the exported trees, applied by the real
# systemd-tmpfiles as systemd-tmpfiles-setup.service does at boot, after bootd-storage.service.
tmpfiles() {
	prefixes=
	for e in "$@"; do prefixes="$prefixes --prefix=$e"; done
	# shellcheck disable=SC2086 # one word per prefix
	systemd-tmpfiles --create $prefixes /etc/tmpfiles.d/bootd.conf >/tmp/tmpfiles.out 2>&1 ||
		fatal "$MASTER: systemd-tmpfiles: $(cat /tmp/tmpfiles.out)"
	say "$MASTER tmpfiles.d applied under $*"
}

# storage NAME [CHROOT]: the base layer's bootd-node storage (bootd-storage.service's step), twice
# (the second run must mount nothing more), its lines reported; its output stays in /tmp/storage.out.
storage() {
	for run in 1 2; do
		${2:+chroot "$2"} /usr/bin/bash /usr/libexec/bootd-node storage >/tmp/storage.out 2>&1
		status=$?
		while read -r line; do say "$1 storage (run $run): $line"; done </tmp/storage.out
		[ "$status" = 0 ] || fatal "$1: bootd-node storage exited $status"
	done
}

# mounted_on DIR [MOUNTS]: "source type count" of what is mounted on DIR.
mounted_on() {
	awk -v d="$1" '$2 == d { src = $1; type = $3; n++ } END { print src, type, n + 0 }' "${2:-/proc/self/mounts}"
}

serve() {
	# The master's data: the disk labelled LABDATA, as bootd-storage.service mounts it at boot.
	storage "$MASTER"
	for d in /home /opt/software /var/spool/slurmctld; do
		expect "$MASTER storage: $d from the LABDATA disk" "/dev/vda ext4 1" "$(mounted_on "$d")"
	done
	expect "$MASTER storage: /var/spool/slurmctld owner and mode" "901:901 700" "$(stat -c '%u:%g %a' /var/spool/slurmctld 2>&1)"
	if [ -d /opt/software/modules/all ]; then ok "$MASTER storage: /opt/software/modules/all"; else fail "$MASTER storage: /opt/software/modules/all: none"; fi
	if grep -q WARNING /tmp/storage.out; then fail "$MASTER storage: no warning: it warned"; else ok "$MASTER storage: no warning"; fi
	exports=$(awk '!/^#/ && NF { print $1 }' /etc/exports)
	[ -n "$exports" ] || fatal "$MASTER: /etc/exports exports nothing"
	tmpfiles $exports

	# What users and the admin put there.
	mkdir /home/alice && chown 1000:1000 /home/alice && chmod 0700 /home/alice || fatal "$MASTER: alice's home"
	mkdir -p "${module%/*}" && echo "$module_text" > "$module" || fatal "$MASTER: module file"
	mkdir /opt/software/incoming && chmod 1777 /opt/software/incoming || fatal "$MASTER: incoming"
	echo "root only" > /opt/software/root-only && chmod 0600 /opt/software/root-only || fatal "$MASTER: root-only file"

	mount -t nfsd nfsd /proc/fs/nfsd || fatal "$MASTER: mount the nfsd file system"
	rpcbind || fatal "$MASTER: rpcbind"
	out=$(exportfs -ra 2>&1) || fatal "$MASTER: exportfs -ra: $out"
	[ -z "$out" ] || fail "$MASTER: exportfs -ra warned: $out"
	exportfs -s | while read -r line; do say "$MASTER export: $line"; done
	rpc.mountd || fatal "$MASTER: rpc.mountd"
	# Grace and lease time 10 s (the least) instead of 90: NFSv4 refuses opens during the grace
	# period after nfsd starts, and this nfsd keeps no client records that could end it early.
	rpc.nfsd --grace-time 10 --lease-time 10 4 || fatal "$MASTER: rpc.nfsd"
	say "$MASTER nfsd: versions $(cat /proc/fs/nfsd/versions), threads $(cat /proc/fs/nfsd/threads)"
	ok "$MASTER serving"
	exit $failed
}

client() {
	say "$COMPUTE /etc/hosts: $(grep -w "$MASTER" /etc/hosts | head -n 1)"
	# Bounded beyond mount.nfs's own 2 minutes of retries, so its message is in. Output to a file,
	# not $(...): that would wait for a killed mount's mount.nfs child too.
	timeout 150 /usr/bin/mount -a -t nfs -T /etc/bootd/fstab >/tmp/mount.out 2>&1 || fatal "$COMPUTE: mount -a -t nfs: $(cat /tmp/mount.out)"
	[ ! -s /tmp/mount.out ] || say "$COMPUTE mount -a said: $(cat /tmp/mount.out)"
	grep ' nfs' /proc/mounts | while read -r src dir type opts rest; do say "$COMPUTE mount: $src $dir $type $opts"; done
	for d in $(awk '!/^#/ && $3 ~ /^nfs/ { print $2 }' /etc/bootd/fstab); do
		if grep -q "^[^ ]* $d nfs" /proc/mounts; then ok "$COMPUTE mounted $d"; else fail "$COMPUTE mounted $d: not in /proc/mounts"; fi
	done

	if as_alice 'echo "written by alice on c1" > /home/alice/hello.txt'; then
		ok "$COMPUTE alice writes her home"
	else
		fail "$COMPUTE alice writes her home"
	fi
	# As alice: root, squashed, cannot even look into her 0700 home.
	expect "$COMPUTE alice's file owner" 1000:1000 "$(as_alice 'stat -c %u:%g /home/alice/hello.txt' 2>&1)"
	expect "$COMPUTE alice reads the master's module file" "$module_text" "$(as_alice "cat $module" 2>&1)"

	# root_squash: root here is nobody there.
	refused "$COMPUTE root cannot write /opt/software" touch /opt/software/made-by-root
	refused "$COMPUTE root cannot read a root-only file" cat /opt/software/root-only
	refused "$COMPUTE root cannot list alice's home" ls /home/alice
	echo "dropped by root on c1" > /opt/software/incoming/from-root || fail "$COMPUTE root writes to incoming"
	expect "$COMPUTE root's file in a world-writable directory, owner" 65534:65534 "$(stat -c %u:%g /opt/software/incoming/from-root 2>&1)"
	exit $failed
}

check() {
	say "$MASTER disk: $(grep ' /home ' /proc/mounts)"
	expect "$MASTER alice's file from $COMPUTE, owner" 1000:1000 "$(stat -c %u:%g /home/alice/hello.txt 2>&1)"
	expect "$MASTER alice's file from $COMPUTE, content" "written by alice on c1" "$(cat /home/alice/hello.txt 2>&1)"
	expect "$MASTER root's file from $COMPUTE, owner" 65534:65534 "$(stat -c %u:%g /opt/software/incoming/from-root 2>&1)"
	if [ -e /opt/software/made-by-root ]; then
		fail "$MASTER nothing of $COMPUTE's root in /opt/software: made-by-root exists"
	else
		ok "$MASTER nothing of $COMPUTE's root in /opt/software"
	fi
	exit $failed
}

# nodisk: the master without its disk, on a root like a netbooted one: an overlayfs of the VM's
# root with its upper layer on tmpfs, chrooted into, with the master's /etc and no disk in /dev,
# in a network namespace of its own (nfsd's export caches are per namespace). exportfs refuses
# /home there, as on a netbooted master; bootd-node storage puts tmpfs on /home and /opt/software
# and warns; exportfs then exports both.
nodisk() {
	r=/tmp/nodisk
	mkdir -p /tmp/ovl "$r" && mount -t tmpfs tmpfs /tmp/ovl && mkdir /tmp/ovl/upper /tmp/ovl/work || fatal "nodisk: tmpfs"
	mount -t overlay overlay -o lowerdir=/,upperdir=/tmp/ovl/upper,workdir=/tmp/ovl/work "$r" || fatal "nodisk: overlay root"
	cp -a "/etc/netns/$MASTER"/* "$r/etc/" || fatal "nodisk: the master's /etc"
	mknod -m 0666 "$r/dev/null" c 1 3 && mount -t proc proc "$r/proc" && mount -t nfsd nfsd "$r/proc/fs/nfsd" || fatal "nodisk: /dev/null, /proc, nfsd"
	say "nodisk root: $(chroot "$r" cat /proc/self/mounts | grep ' / ')"

	chroot "$r" /usr/sbin/exportfs -ra >/tmp/nodisk.refused 2>&1
	while read -r line; do say "nodisk exportfs -ra before storage: $line"; done </tmp/nodisk.refused
	for d in /home /opt/software; do
		if grep -q "$d does not support NFS export" /tmp/nodisk.refused; then
			ok "nodisk exportfs refuses $d on the overlay root"
		else
			fail "nodisk exportfs refuses $d on the overlay root: it did not"
		fi
	done

	storage nodisk "$r"
	chroot "$r" cat /proc/self/mounts >/tmp/nodisk.mounts
	expect "nodisk storage: /home on tmpfs" "tmpfs tmpfs 1" "$(mounted_on /home /tmp/nodisk.mounts)"
	expect "nodisk storage: /opt/software on tmpfs" "tmpfs tmpfs 1" "$(mounted_on /opt/software /tmp/nodisk.mounts)"
	if grep -q "WARNING: .*mkfs.xfs -L LABDATA /dev/sdX" /tmp/storage.out; then
		ok "nodisk storage: warning with the command"
	else
		fail "nodisk storage: warning with the command: none"
	fi

	if out=$(chroot "$r" /usr/sbin/exportfs -ra 2>&1) && [ -z "$out" ]; then ok "nodisk exportfs -ra"; else fail "nodisk exportfs -ra: $out"; fi
	chroot "$r" /usr/sbin/exportfs -s >/tmp/nodisk.exports 2>&1
	while read -r line; do say "nodisk export: $line"; done </tmp/nodisk.exports
	for d in /home /opt/software; do
		if grep -q "^$d " /tmp/nodisk.exports; then ok "nodisk exports $d"; else fail "nodisk exports $d: not in exportfs -s"; fi
	done
	exit $failed
}

main() {
	say "start"
	mkdir -p /home /opt/software # mount points on every node
	/usr/sbin/ip netns exec "$MASTER" sh "$0" serve || fatal "the master's NFS server did not come up"
	mountd=$(pidof rpc.mountd) || fatal "no rpc.mountd"
	/usr/sbin/ip netns exec "$COMPUTE" sh "$0" client || failed=1
	nsenter -t "${mountd%% *}" -m -n sh "$0" check || failed=1
	/usr/sbin/ip netns add nodisk && /usr/sbin/ip netns exec nodisk sh "$0" nodisk || failed=1
	say "done"
	exit $failed
}

case "$1" in
serve) serve ;;
client) client ;;
check) check ;;
nodisk) nodisk ;;
*) main ;;
esac
`
