// Package layers holds the image layers (TOML) and the files they install; its tests exercise
// the layers' own scripts, the parts of an image that run on a node.
package layers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/spec"
	"github.com/labcluster/gpucluster/internal/testkit/ldd"
)

// chroot is a minimal root: busybox as sh and the applets the scripts use, plus files.
func chroot(t *testing.T, files map[string]string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests chroot: run them as root, as CI does")
	}
	root := t.TempDir()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static: %v", err)
	}
	putFile(t, root, "bin/busybox", bb, 0o755)
	for _, a := range []string{"sh", "cat", "cut", "sha256sum", "tr", "sed", "head", "printf", "echo", "mktemp", "rm", "sleep", "tar",
		"mkdir", "chown", "chmod", "id", "grep", "mv", "nproc", "tail", "sync", "cp", "stat", "readlink", "basename", "ln"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	for p, c := range files {
		putFile(t, root, p, []byte(c), 0o755)
	}
	return root
}

func run(t *testing.T, root string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("chroot", append([]string{root}, args...)...)
	cmd.Env = append([]string{"PATH=/bin:/sbin:/usr/bin"}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// verifyLib is the dracut-lib.sh stand-in for bootd-verify-root.sh: getarg answers
// rd.bootd.sha256= from WANT and rd.emergency from EMERGENCY (nothing, and false, when empty),
// and die does what dracut 059's does without rd.shell: the FATAL line, /run/initramfs/.die,
// exit 1 (with systemd in the initramfs it also halts: it records that in /tmp/systemctl).
const verifyLib = `getarg() {
	case "$1" in rd.bootd.sha256=) v=$WANT ;; rd.emergency) v=$EMERGENCY ;; *) v= ;; esac
	[ -n "$v" ] && echo "$v"
}
warn() { echo "WARN $*"; }
info() { echo "INFO $*"; }
die() {
	echo "dracut: FATAL: $*"
	mkdir -p /run/initramfs && : > /run/initramfs/.die
	[ -n "$DRACUT_SYSTEMD" ] && echo "--no-block --force halt" > /tmp/systemctl
	exit 1
}
`

// initLoop is the part of dracut 059's script init (modules.d/99base/init.sh) that runs the
// initqueue: with its EXIT trap (the emergency shell) set, it sources the queued jobs in its
// own shell. Here it makes one pass and reports what it would do next.
const initLoop = `. /lib/dracut-lib.sh
hookdir=/lib/dracut/hooks
trap 'echo EMERGENCY-SHELL' 0
for job in "$hookdir"/initqueue/*.sh; do
	[ -e "$job" ] || break
	job=$job . "$job"
done
trap - 0
echo INIT-WAITS-FOR-ROOT
`

func TestVerifyRoot(t *testing.T) {
	script, err := os.ReadFile("files/base/dracut/99bootd-verify/bootd-verify-root.sh")
	if err != nil {
		t.Fatal(err)
	}
	image := "squashfs bytes"
	sum := sha256.Sum256([]byte(image))
	good := hex.EncodeToString(sum[:])
	other := strings.Repeat("0", 64)
	mismatch := "root image /tmp/rootfs.img has sha256 " + good + ", want " + other
	tests := []struct {
		name, want, image, env string
		mounted                bool
		why                    string // the refusal's warning
	}{
		{name: "matching hash", want: good, image: "/tmp/rootfs.img", mounted: true},
		{name: "other hash", want: other, image: "/tmp/rootfs.img", why: mismatch},
		{name: "other hash, rd.emergency=poweroff", want: other, image: "/tmp/rootfs.img", env: "EMERGENCY=poweroff", why: mismatch},
		{name: "other hash, systemd in the initramfs", want: other, image: "/tmp/rootfs.img", env: "DRACUT_SYSTEMD=1", why: mismatch},
		{name: "download cannot be read", want: good, image: "/tmp/missing.img", why: "cannot read the root image /tmp/missing.img"},
		{name: "download is a directory", want: good, image: "/tmp", why: "cannot read the root image /tmp"},
		{name: "no hash on the command line", want: "", image: "/tmp/rootfs.img", mounted: true}, // a hand-made boot: dracut's behaviour
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := chroot(t, map[string]string{
				"sbin/dmsquash-live-root":           string(script),
				"sbin/dmsquash-live-root.unchecked": "#!/bin/sh\necho MOUNTED \"$1\"\n",
				"lib/dracut-lib.sh":                 verifyLib,
				"lib/dracut/hooks/initqueue/.keep":  "",
				"dev/null":                          "", // a plain file will do for the redirections
				"tmp/rootfs.img":                    image,
				"init-loop":                         initLoop,
				// what rd.emergency may ask for: none of them in dracut's script initramfs
				"bin/poweroff": "#!/bin/sh\necho POWEROFF\n",
			})
			env := []string{"WANT=" + tt.want}
			if tt.env != "" {
				env = append(env, tt.env)
			}
			start := time.Now()
			out, err := run(t, root, env, "/bin/sh", "/sbin/dmsquash-live-root", tt.image)
			if got := strings.Contains(out, "MOUNTED "+tt.image); got != tt.mounted || (err != nil) == tt.mounted {
				t.Fatalf("mounted %v (err %v), want %v:\n%s", got, err, tt.mounted, out)
			}
			job := filepath.Join(root, "lib/dracut/hooks/initqueue/bootd-refused.sh")
			_, jerr := os.Stat(job)
			if tt.mounted {
				if jerr == nil || exists(root, "run/initramfs/.die") {
					t.Fatalf("an accepted image stops the boot:\n%s", out)
				}
				return
			}
			if !strings.Contains(out, "WARN bootd: "+tt.why) {
				t.Errorf("the refusal does not say why (%q):\n%s", tt.why, out)
			}
			if !strings.Contains(out, "dracut: FATAL: bootd: refusing a root image that is not the one bootd verified") {
				t.Errorf("no FATAL line from die:\n%s", out)
			}
			if !exists(root, "run/initramfs/.die") {
				t.Errorf("the refusal did not go through dracut's die (no /run/initramfs/.die):\n%s", out)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the refusal took %s", d)
			}
			if strings.Contains(tt.env, "DRACUT_SYSTEMD") {
				// die halts the machine itself; nothing is queued for dracut-initqueue.
				if jerr == nil {
					t.Errorf("a job was queued with systemd in the initramfs")
				}
				if b, _ := os.ReadFile(filepath.Join(root, "tmp/systemctl")); !strings.Contains(string(b), "halt") {
					t.Errorf("die did not halt the machine with systemd in the initramfs")
				}
				return
			}
			if jerr != nil || !exists(root, "lib/dracut/hooks/initqueue/work") {
				t.Fatalf("no job queued for dracut's init (%v):\n%s", jerr, out)
			}
			// dracut's init sources the job in its own shell: it must give up at once (exit:
			// the kernel panics) after trying rd.emergency, never reach its emergency shell and
			// never go back to waiting for a root.
			out, err = run(t, root, env, "/bin/sh", "/init-loop")
			if err == nil || strings.Contains(out, "EMERGENCY-SHELL") || strings.Contains(out, "INIT-WAITS-FOR-ROOT") {
				t.Fatalf("init did not give up (err %v):\n%s", err, out)
			}
			act := "halt"
			if tt.env == "EMERGENCY=poweroff" {
				act = "poweroff"
				if !strings.Contains(out, "POWEROFF") {
					t.Errorf("rd.emergency=poweroff: init did not run poweroff:\n%s", out)
				}
			}
			if !strings.Contains(out, "WARN bootd: root image refused: stopping the node ("+act+"), no shell") ||
				!strings.Contains(out, "WARN bootd: init gives up") {
				t.Errorf("init's job does not say what it does:\n%s", out)
			}
			if exists(root, "lib/dracut/hooks/initqueue/bootd-refused.sh") {
				t.Errorf("the job stays queued")
			}
			t.Logf("init:\n%s", out)
		})
	}
}

func exists(root, path string) bool {
	_, err := os.Stat(filepath.Join(root, path))
	return err == nil
}

// nodeRoot is a chroot for bootd-node: the script at /usr/libexec/bootd-node, the kernel command
// line naming bootd, and files (which win).
func nodeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	script, err := os.ReadFile("files/base/bootd/bootd-node")
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]string{
		"usr/libexec/bootd-node": string(script),
		"proc/cmdline":           "BOOT_IMAGE=vmlinuz bootd=http://10.80.0.1 quiet\n",
		"dev/null":               "", // a plain file will do for the redirections
		"tmp/.keep":              "",
	}
	maps.Copy(all, files)
	return chroot(t, all)
}

// curlServesOverlay is curl for bootd-node overlay: it copies /overlay.tgz (serveOverlay) to the
// file after -o.
const curlServesOverlay = "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && cat /overlay.tgz > \"$2\"; shift; done\n"

// serveOverlay makes /overlay.tgz in root the overlay bootd serves: /etc/hostname (c1) and files.
func serveOverlay(t *testing.T, root string, files ...httpd.OverlayFile) {
	t.Helper()
	var overlay bytes.Buffer
	files = append([]httpd.OverlayFile{{Path: "/etc/hostname", Mode: 0o644, Data: []byte("c1\n")}}, files...)
	if err := httpd.WriteTarGz(&overlay, files); err != nil {
		t.Fatal(err)
	}
	putFile(t, root, "overlay.tgz", overlay.Bytes(), 0o644)
}

// bootd-node report posts slurmd -C's first line; a node without slurmd (the master) posts the
// same fields from the kernel, so bootd accepts the master's report too.
func TestBootdNodeReport(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  *regexp.Regexp
	}{
		{"slurmd", map[string]string{
			// slurmd's line with characters JSON must escape.
			"bin/slurmd": "#!/bin/sh\necho 'NodeName=c1 CPUs=8 RealMemory=15866 Features=\"a\\b\"'\necho 'UpTime=0-00:01:00'\n",
		}, regexp.MustCompile(`^NodeName=c1 CPUs=8 RealMemory=15866 Features="a\\b"$`)},
		{"no slurmd (the master)", map[string]string{
			"proc/meminfo":             "MemTotal:       16250164 kB\nMemFree:        15000000 kB\n",
			"proc/sys/kernel/hostname": "master\n",
		}, regexp.MustCompile(`^NodeName=master CPUs=[1-9][0-9]* RealMemory=15869$`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{
				// curl records its arguments.
				"bin/curl": "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > /tmp/curl.args\n",
			}
			maps.Copy(files, tc.files)
			root := nodeRoot(t, files)
			if out, err := run(t, root, nil, "/bin/sh", "/usr/libexec/bootd-node", "report"); err != nil {
				t.Fatalf("bootd-node report: %v\n%s", err, out)
			}
			b, err := os.ReadFile(filepath.Join(root, "tmp/curl.args"))
			if err != nil {
				t.Fatal(err)
			}
			args := strings.Split(strings.TrimSpace(string(b)), "\n")
			var body string
			for i, a := range args {
				if a == "--data-binary" && i+1 < len(args) {
					body = args[i+1]
				}
			}
			var report struct {
				SlurmdC string   `json:"slurmd_c"`
				GPUs    []string `json:"gpus"`
			}
			if err := json.Unmarshal([]byte(body), &report); err != nil {
				t.Fatalf("report body %q is not JSON: %v", body, err)
			}
			if !tc.want.MatchString(report.SlurmdC) || len(report.GPUs) != 0 {
				t.Fatalf("report = %+v, want slurmd_c matching %s and no GPUs", report, tc.want)
			}
			if !strings.Contains(string(b), "http://10.80.0.1/api/v1/node/hardware") || !strings.Contains(string(b), "600-1023") {
				t.Fatalf("curl was not asked for bootd's hardware endpoint from a privileged port:\n%s", b)
			}
		})
	}
}

// bootd-node report on a node's first boot: bootd answers that the report changed what it holds,
// and bootd-node fetches the node's files again, now with the GPUs in gres.conf and slurmd's
// options (bootd-report.service runs before slurmd: its first start registers them). An answer
// of "ok" (nothing changed: every later boot) fetches nothing more.
func TestBootdNodeReportRefetches(t *testing.T) {
	for _, tc := range []struct {
		answer  string
		refetch bool
	}{{"changed", true}, {"ok", false}} {
		t.Run(tc.answer, func(t *testing.T) {
			// curl answers the hardware report with tc.answer and the overlay request with the tgz.
			curl := "#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in */api/v1/node/hardware) echo " + tc.answer + "; exit 0 ;; esac; done\n" +
				"while [ $# -gt 0 ]; do [ \"$1\" = -o ] && cat /overlay.tgz > \"$2\"; shift; done\n"
			root := nodeRoot(t, map[string]string{
				"bin/curl":       curl,
				"bin/slurmd":     "#!/bin/sh\necho 'NodeName=c1 CPUs=8 RealMemory=15866'\n",
				"bin/nvidia-smi": "#!/bin/sh\necho 'NVIDIA GeForce RTX 3090'\necho 'NVIDIA GeForce RTX 3090'\n",
				"etc/.keep":      "", "var/lib/.keep": "", "proc/sys/kernel/hostname": "c1\n",
			})
			serveOverlay(t, root, httpd.OverlayFile{Path: "/etc/slurm/gres.conf", Mode: 0o644, Data: []byte("Name=gpu Type=rtx3090 File=/dev/nvidia0\n")})
			out, err := run(t, root, nil, "/bin/sh", "/usr/libexec/bootd-node", "report")
			if err != nil {
				t.Fatalf("bootd-node report: %v\n%s", err, out)
			}
			if got := exists(root, "etc/slurm/gres.conf"); got != tc.refetch {
				t.Errorf("gres.conf fetched %v, want %v:\n%s", got, tc.refetch, out)
			}
		})
	}
}

// withBash copies the host's bash into root as /bin/bash: Rocky's /bin/sh is bash, which runs
// programs from PATH, where busybox's shell would prefer its own applets (mount among them) to
// the stand-ins below.
func withBash(t *testing.T, root string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	withHost(t, root, map[string]string{"/bin/bash": bash})
}

// withHost copies host programs (path in root: host path) and the libraries ldd names for them
// into root.
func withHost(t *testing.T, root string, programs map[string]string) {
	t.Helper()
	files := maps.Clone(programs)
	for _, prog := range programs {
		libs, err := ldd.Needs(prog)
		if err != nil {
			t.Fatal(err)
		}
		for _, lib := range libs {
			files[lib] = lib
		}
	}
	for dst, src := range files {
		real, err := filepath.EvalSymlinks(src)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		putFile(t, root, dst, data, 0o755)
	}
}

// Stand-ins for bootd-node storage. /proc/self/mounts is a plain file of the chroot: mount
// appends what it mounts there (and logs its arguments to /tmp/mount.log), so the script's own
// view of what is mounted follows; it fails for a device listed in /fail-mount. blkid logs its
// arguments and prints the devices listed in /labels/<label>; udevadm logs its arguments.
const (
	standinMount = `#!/bin/sh
echo "$*" >> /tmp/mount.log
type=bind
while [ $# -gt 2 ]; do
	case "$1" in -t) type=$2; shift ;; esac
	shift
done
if [ -e /fail-mount ] && grep -qx "$1" /fail-mount; then echo "mount: $1: wrong fs type, bad superblock" >&2; exit 32; fi
[ "$type" = auto ] && type=xfs
echo "$1 $2 $type rw 0 0" >> /proc/self/mounts
`
	standinBlkid = `#!/bin/sh
echo "$*" >> /tmp/blkid.log
for a in "$@"; do
	case "$a" in LABEL=*) [ -s "/labels/${a#LABEL=}" ] && cat "/labels/${a#LABEL=}" && exit 0 ;; esac
done
exit 2
`
	standinUdevadm = "#!/bin/sh\necho \"$*\" >> /tmp/udevadm.log\n"
)

// storageRoot is a chroot for bootd-node storage: a netbooted master (overlayfs root) unless
// mounts says otherwise, the slurm account, and the given node.env and labelled devices.
func storageRoot(t *testing.T, nodeEnv, mounts string, labels map[string]string) string {
	t.Helper()
	files := map[string]string{
		"bin/mount":        standinMount,
		"bin/blkid":        standinBlkid,
		"bin/udevadm":      standinUdevadm,
		"proc/self/mounts": mounts,
		"etc/passwd":       "root:x:0:0:root:/root:/bin/sh\nslurm:x:901:901:Slurm:/var/lib/slurm:/sbin/nologin\n",
		"etc/group":        "root:x:0:\nslurm:x:901:\n",
	}
	if nodeEnv != "" {
		files["etc/bootd/node.env"] = nodeEnv
	}
	for label, devs := range labels {
		files["labels/"+label] = devs
	}
	root := nodeRoot(t, files)
	withBash(t, root)
	return root
}

const (
	masterEnv     = "NODE_NAME=master\nROLE=master\nNODE_ADDRESS=10.80.0.100\nMASTER=master\nBOOTD_URL=http://10.80.0.1\n"
	netbootRoot   = "rootfs / rootfs rw 0 0\nLiveOS_rootfs / overlay rw,lowerdir=/run/rootfsbase,upperdir=/run/overlayfs/upper 0 0\nproc /proc proc rw 0 0\n"
	installedRoot = "/dev/sda3 / xfs rw,relatime 0 0\n/dev/sda1 /boot xfs rw 0 0\n"
)

func storage(t *testing.T, root string, env ...string) (string, error) {
	t.Helper()
	return run(t, root, env, "/bin/bash", "/usr/libexec/bootd-node", "storage")
}

func readChroot(t *testing.T, root, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// TestBootdNodeStorage runs the master's storage step against stand-in blkid and mount: with a
// disk labelled LABDATA its trees are bound from it; without one, on a netbooted root, tmpfs and
// a warning with the command that makes one; an installed root keeps its own; a second run
// mounts nothing more; two labelled disks or a failed mount stop it without a tmpfs in their
// place; computes do nothing.
func TestBootdNodeStorage(t *testing.T) {
	diskMounts := []string{
		"-t auto /dev/sdb1 /var/lib/labdata",
		"--bind /var/lib/labdata/home /home",
		"--bind /var/lib/labdata/software /opt/software",
		"--bind /var/lib/labdata/slurmctld /var/spool/slurmctld",
	}
	tmpfsMounts := []string{"-t tmpfs -o mode=0755 tmpfs /home", "-t tmpfs -o mode=0755 tmpfs /opt/software"}
	tests := []struct {
		name, env, mounts string
		labels            map[string]string
		failMount         string // a device the stand-in mount fails on
		runEnv            []string
		fails             bool
		wantMounts        []string // mount's arguments, in order, after the first run (the second adds none)
		wantOut           []string // in its output
		wantNot           []string // not in its output
		wantBlkid         string   // in blkid's arguments; "" for not run
	}{
		{name: "disk labelled LABDATA", env: masterEnv, mounts: netbootRoot, labels: map[string]string{"LABDATA": "/dev/sdb1\n"},
			wantMounts: diskMounts, wantOut: []string{"/dev/sdb1 (LABEL=LABDATA) on /var/lib/labdata", "/home is /var/lib/labdata/home"},
			wantNot: []string{"WARNING"}, wantBlkid: "-c /dev/null -o device -t LABEL=LABDATA"},
		{name: "no disk, netbooted root", env: masterEnv, mounts: netbootRoot,
			wantMounts: tmpfsMounts,
			wantOut: []string{"WARNING: no file system labelled LABDATA: /home /opt/software /var/spool/slurmctld are in RAM and LOST AT EVERY REBOOT",
				"mkfs.xfs -L LABDATA /dev/sdX", "mkfs.ext4 -L LABDATA /dev/sdX"},
			wantBlkid: "LABEL=LABDATA"},
		{name: "no disk, installed root", env: masterEnv, mounts: installedRoot,
			wantOut: []string{"/home is on xfs, kept", "/opt/software is on xfs, kept"}, wantNot: []string{"WARNING"}, wantBlkid: "LABEL=LABDATA"},
		{name: "disk on an installed root", env: masterEnv, mounts: installedRoot, labels: map[string]string{"LABDATA": "/dev/sdb1\n"},
			wantMounts: diskMounts, wantNot: []string{"WARNING"}, wantBlkid: "LABEL=LABDATA"},
		{name: "label from the environment", env: masterEnv, mounts: netbootRoot, runEnv: []string{"LABDATA_LABEL=SCRATCH"},
			labels: map[string]string{"LABDATA": "/dev/sdc1\n", "SCRATCH": "/dev/sdb1\n"}, wantMounts: diskMounts, wantBlkid: "LABEL=SCRATCH"},
		{name: "a label from the environment that no disk has", env: masterEnv, mounts: netbootRoot, runEnv: []string{"LABDATA_LABEL=OTHER"},
			labels: map[string]string{"LABDATA": "/dev/sdb1\n"}, wantMounts: tmpfsMounts, wantOut: []string{"mkfs.xfs -L OTHER /dev/sdX"}, wantBlkid: "LABEL=OTHER"},
		{name: "two disks labelled LABDATA", env: masterEnv, mounts: netbootRoot, labels: map[string]string{"LABDATA": "/dev/sdb1\n/dev/sdc1\n"},
			fails: true, wantOut: []string{"2 file systems are labelled LABDATA (/dev/sdb1 /dev/sdc1)"}, wantBlkid: "LABEL=LABDATA"},
		{name: "disk that does not mount", env: masterEnv, mounts: netbootRoot, failMount: "/dev/sdb1", labels: map[string]string{"LABDATA": "/dev/sdb1\n"},
			fails: true, wantMounts: diskMounts[:1], wantOut: []string{"error: cannot mount /dev/sdb1 (LABEL=LABDATA) on /var/lib/labdata", "nothing was formatted"},
			wantNot: []string{"tmpfs"}, wantBlkid: "LABEL=LABDATA"},
		{name: "compute", env: "NODE_NAME=c1\nROLE=compute\n", mounts: netbootRoot, labels: map[string]string{"LABDATA": "/dev/sdb1\n"},
			wantOut: []string{"role compute: only the master keeps /home and /opt/software, nothing to do"}},
		{name: "no node.env", mounts: netbootRoot, fails: true, wantOut: []string{"no /etc/bootd/node.env"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := storageRoot(t, tt.env, tt.mounts, tt.labels)
			if tt.failMount != "" {
				if err := os.WriteFile(filepath.Join(root, "fail-mount"), []byte(tt.failMount+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out, err := storage(t, root, tt.runEnv...)
			if (err != nil) != tt.fails {
				t.Fatalf("bootd-node storage: err %v, want failure %v:\n%s", err, tt.fails, out)
			}
			t.Logf("bootd-node storage:\n%s", out)
			for _, w := range tt.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q", w)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("output has %q", w)
				}
			}
			mounts := func() []string {
				return slices.DeleteFunc(strings.Split(readChroot(t, root, "tmp/mount.log"), "\n"), func(s string) bool { return s == "" })
			}
			if got := mounts(); !slices.Equal(got, tt.wantMounts) {
				t.Errorf("mounts:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.wantMounts, "\n  "))
			}
			blkid := readChroot(t, root, "tmp/blkid.log")
			if tt.wantBlkid == "" && blkid != "" || !strings.Contains(blkid, tt.wantBlkid) {
				t.Errorf("blkid ran with %q, want %q", blkid, tt.wantBlkid)
			}
			if tt.wantBlkid != "" && !strings.Contains(readChroot(t, root, "tmp/udevadm.log"), "settle --timeout=30") {
				t.Errorf("no bounded udevadm settle before blkid: %q", readChroot(t, root, "tmp/udevadm.log"))
			}
			if tt.fails {
				return
			}

			// Idempotent: a second run mounts nothing more and says what it left.
			again, err := storage(t, root, tt.runEnv...)
			if err != nil {
				t.Fatalf("second run: %v\n%s", err, again)
			}
			if got := mounts(); !slices.Equal(got, tt.wantMounts) {
				t.Errorf("after a second run, mounts:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.wantMounts, "\n  "))
			}
			if len(tt.wantMounts) > 0 && !strings.Contains(again, "/home is mounted already: left as it is") {
				t.Errorf("second run:\n%s", again)
			}

			switch {
			case slices.Equal(tt.wantMounts, diskMounts):
				// The disk's trees, made by the script (the disk is a directory of the chroot here).
				for _, d := range []string{"home", "software/modules/all"} {
					if st, err := os.Stat(filepath.Join(root, "var/lib/labdata", d)); err != nil || !st.IsDir() || st.Mode().Perm() != 0o755 {
						t.Errorf("/var/lib/labdata/%s: %v %v, want a 0755 directory", d, st, err)
					}
				}
				st, err := os.Stat(filepath.Join(root, "var/lib/labdata/slurmctld"))
				if err != nil {
					t.Fatal(err)
				}
				sys := st.Sys().(*syscall.Stat_t)
				if got := fmt.Sprintf("%d:%d %o", sys.Uid, sys.Gid, st.Mode().Perm()); got != "901:901 700" {
					t.Errorf("/var/lib/labdata/slurmctld is %s, want 901:901 700 (slurm's fixed id)", got)
				}
			case slices.Equal(tt.wantMounts, tmpfsMounts):
				if st, err := os.Stat(filepath.Join(root, "opt/software/modules/all")); err != nil || !st.IsDir() {
					t.Errorf("no /opt/software/modules/all on the tmpfs: %v", err)
				}
			}
		})
	}
}

// TestStorageUnit checks how bootd-storage.service is placed: the master image alone enables it,
// and it runs the script's step after the node's files and before tmpfiles.d, the NFS server
// and slurmctld.
func TestStorageUnit(t *testing.T) {
	b, err := os.ReadFile("files/base/bootd/bootd-storage.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			unit[k] = append(unit[k], strings.Fields(v)...)
		}
	}
	for k, want := range map[string][]string{
		"ExecStart":       {"/usr/libexec/bootd-node", "storage"},
		"After":           {"bootd-overlay.service", "systemd-udev-trigger.service", "local-fs.target"},
		"Before":          {"systemd-tmpfiles-setup.service", "nfs-server.service", "slurmctld.service", "sysinit.target"},
		"Type":            {"oneshot"},
		"RemainAfterExit": {"yes"},
		"WantedBy":        {"sysinit.target"},
	} {
		for _, w := range want {
			if !slices.Contains(unit[k], w) {
				t.Errorf("bootd-storage.service: %s= lacks %s (%v)", k, w, unit[k])
			}
		}
	}
	for role, wantEnabled := range map[string]bool{"master": true, "compute": false} {
		p := rolePlan(t, role)
		var enabled, installed bool
		for _, l := range p.Layers {
			enabled = enabled || slices.Contains(l.Services.Enable, "bootd-storage")
			installed = installed || slices.ContainsFunc(l.Files, func(f spec.File) bool { return f.Path == "/usr/lib/systemd/system/bootd-storage.service" })
		}
		if enabled != wantEnabled || installed != wantEnabled {
			t.Errorf("%s image: bootd-storage installed %v, enabled %v; want %v", role, installed, enabled, wantEnabled)
		}
	}
}

// TestUnitsVerify loads the master and compute images' own units with systemd itself
// (systemd-analyze verify) in a root holding them, the executables they name, and systemd's
// stock units (Debian's here; the targets they order against are upstream's, as on Rocky). It
// catches an ordering cycle, a missing executable or a bad directive; the broken case shows it can.
func TestUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze (Debian package systemd) is needed: ./scripts/setup-debian.sh installs it")
	}
	for _, role := range []string{"master", "compute"} {
		root, units := unitRoot(t, role)
		t.Run(role, func(t *testing.T) {
			out, err := exec.Command(analyze, append([]string{"verify", "--root=" + root}, units...)...).CombinedOutput()
			if err != nil || len(out) > 0 {
				t.Fatalf("systemd-analyze verify %v: %v\n%s", units, err, out)
			}
		})
		if role != "master" {
			continue
		}
		t.Run("an ordering cycle is caught", func(t *testing.T) {
			p := filepath.Join(root, "usr/lib/systemd/system/bootd-storage.service")
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			broken := strings.Replace(string(b), "\nBefore=", "\nBefore=bootd-overlay.service ", 1)
			if err := os.WriteFile(p, []byte(broken), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(analyze, "verify", "--root="+root, "bootd-storage.service", "bootd-overlay.service").CombinedOutput()
			if err == nil || !strings.Contains(string(out), "cycl") {
				t.Fatalf("a cycle between bootd-storage and bootd-overlay passed: %v\n%s", err, out)
			}
		})
	}
}

// rolePlan loads ../images/<role>.toml and resolves it against these layers.
func rolePlan(t *testing.T, role string) *spec.Plan {
	t.Helper()
	img, err := spec.LoadImage(filepath.Join("..", "images", role+".toml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := spec.Resolve(img, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// unitRoot builds a root with the role image's units and executables and the host's stock
// systemd units, and returns it with the names of the image's own units.
func unitRoot(t *testing.T, role string) (string, []string) {
	t.Helper()
	p := rolePlan(t, role)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-r", "/usr/lib/systemd", filepath.Join(root, "usr/lib/")).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	// A drop-in for a packaged unit (/etc/systemd/system/U.d/*.conf) comes with a stand-in for U,
	// which the image's package would install.
	const standIn = "/usr/libexec/stand-in"
	putFile(t, root, standIn, []byte("#!/bin/sh\n"), 0o755)
	units := map[string]bool{}
	for _, l := range p.Layers {
		for _, f := range l.Files {
			if f.Source == "" {
				continue
			}
			b, err := f.Data()
			if err != nil {
				t.Fatal(err)
			}
			dropInFor, inEtc := strings.CutPrefix(filepath.Dir(f.Path), "/etc/systemd/system/")
			switch {
			case strings.HasPrefix(f.Path, "/usr/lib/systemd/system/"):
				putFile(t, root, f.Path, b, 0o644)
				units[filepath.Base(f.Path)] = true
			case strings.HasPrefix(f.Path, "/usr/libexec/"):
				putFile(t, root, f.Path, b, 0o755)
			case inEtc && strings.HasSuffix(dropInFor, ".d"):
				unit := strings.TrimSuffix(dropInFor, ".d")
				putFile(t, root, f.Path, b, 0o644)
				putFile(t, root, "/usr/lib/systemd/system/"+unit,
					[]byte("[Unit]\nDescription=stand-in for "+unit+"\n[Service]\nExecStart="+standIn+"\n"), 0o644)
				units[unit] = true
			}
		}
	}
	// The programs the image's own units run that come with its packages (not with its layers'
	// files): stand-ins where the package puts them, as long as the image still installs it.
	for path, pkg := range packagedPrograms {
		if slices.Contains(p.PackageNames(), pkg) {
			putFile(t, root, path, []byte("#!/bin/sh\n"), 0o755)
		}
	}
	if len(units) == 0 {
		t.Fatalf("the %s image installs no units", role)
	}
	return root, slices.Sorted(maps.Keys(units))
}

// packagedPrograms are the programs the layers' own units run, by the package that installs them
// (layers/monitoring.toml).
var packagedPrograms = map[string]string{
	"/usr/bin/node_exporter": "golang-github-prometheus-node-exporter",
	"/usr/bin/prometheus":    "golang-github-prometheus",
}

// putFile writes data to path under root, making its directories.
func putFile(t *testing.T, root, path string, data []byte, mode os.FileMode) {
	t.Helper()
	dst := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		t.Fatal(err)
	}
}

// bootd-node overlay unpacks the node's files over / (tar never writes /etc/fstab: a compute's
// block comes as /etc/bootd/fstab). It puts the block after the node's own lines: a disk install
// keeps its /, /boot and swap (also when the last line lacks its newline), a block from an
// earlier boot is replaced, and systemd is told to read the file again and mount what is new (it
// made its mount units before the overlay came); an unchanged file is left alone, systemd too.
// A node whose overlay has no block (the master) keeps its fstab as it is, and so does one whose
// unpack fails. Files the last overlay unpacked that this one lacks go (each case's node booted as
// a master with a compute's block before: its root key goes, and the block unless it comes again).
func TestBootdNodeOverlay(t *testing.T) {
	const (
		own    = "UUID=1234 / xfs defaults 0 0\nUUID=5678 /boot xfs defaults 0 0\n"
		block  = "# bootd: begin. The master's shares\nmaster:/home /home nfs defaults,_netdev 0 0\n# bootd: end\n"
		old    = "# bootd: begin. The master's shares\nold-master:/home /home nfs defaults 0 0\n# bootd: end\n"
		reload = "daemon-reload\n--no-block start remote-fs.target\n"
	)
	withBlock := []httpd.OverlayFile{{Path: "/etc/bootd/fstab", Mode: 0o644, Data: []byte(block)}}
	for _, tc := range []struct {
		name      string
		fstab     string              // before; "" for none
		overlay   []httpd.OverlayFile // the overlay's files besides /etc/hostname
		systemd   bool                // running under systemd
		want      string              // /etc/fstab after; "" for none
		systemctl string              // what systemctl was asked, in order
		fails     bool
	}{
		{"netboot", "", withBlock, true, block, reload, false},
		{"disk install, first boot", own, withBlock, true, own + block, reload, false},
		{"disk install, later boot", own + old, withBlock, true, own + block, reload, false},
		{"last line without its newline", strings.TrimSuffix(own, "\n"), withBlock, true, own + block, reload, false},
		{"disk install, block unchanged", own + block, withBlock, true, own + block, "", false},
		{"the master: no block in its overlay", own, nil, true, own, "", false},
		{"the master, a compute before: its old block goes", own + old, nil, true, own, reload, false},
		{"the master, no fstab at all", "", nil, true, "", "", false},
		{"not under systemd", "", withBlock, false, block, "", false},
		{"the unpack fails", own, append(slices.Clone(withBlock), httpd.OverlayFile{Path: "/etc/hostname/x", Mode: 0o644, Data: []byte("a file under a file")}), true, own, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chrootFiles := map[string]string{
				"proc/sys/kernel/hostname": "localhost\n",
				"etc/bootd/fstab":          "# a block from the boot before: this overlay's decides\n",
				"root/.ssh/id_ed25519":     "the master's root key, from the boot before\n",
				// What the boot before unpacked.
				"var/lib/bootd-node/overlay.files": "./etc/hostname\n./etc/bootd/fstab\n./root/.ssh/id_ed25519\n",
				"bin/curl":                         curlServesOverlay,
				// systemctl records its arguments.
				"bin/systemctl": "#!/bin/sh\necho \"$*\" >> /tmp/systemctl.args\n",
			}
			if tc.fstab != "" {
				chrootFiles["etc/fstab"] = tc.fstab
			}
			if tc.systemd {
				chrootFiles["run/systemd/system/.keep"] = ""
			}
			root := nodeRoot(t, chrootFiles)
			withBash(t, root) // Rocky's /bin/sh
			serveOverlay(t, root, tc.overlay...)
			// Under a umask that would leave a new fstab unreadable to users, unless it sets the mode.
			out, err := run(t, root, nil, "/bin/bash", "-c", "umask 077 && exec /bin/bash /usr/libexec/bootd-node overlay")
			if (err != nil) != tc.fails {
				t.Fatalf("bootd-node overlay: %v, want failure %v\n%s", err, tc.fails, out)
			}
			got, _ := os.ReadFile(filepath.Join(root, "etc/fstab"))
			if string(got) != tc.want {
				t.Errorf("/etc/fstab:\n%s\nwant:\n%s", got, tc.want)
			}
			if tc.want != "" && tc.want != tc.fstab {
				checkMode(t, root, "etc/fstab", 0o644)
			}
			asked, _ := os.ReadFile(filepath.Join(root, "tmp/systemctl.args"))
			if string(asked) != tc.systemctl {
				t.Errorf("systemctl asked:\n%s\nwant:\n%s", asked, tc.systemctl)
			}
			if h, _ := os.ReadFile(filepath.Join(root, "proc/sys/kernel/hostname")); !tc.fails && string(h) != "c1\n" {
				t.Errorf("hostname %q, want c1", h)
			}
			if _, err := os.Stat(filepath.Join(root, "etc/fstab.bootd-new")); err == nil {
				t.Error("etc/fstab.bootd-new left behind")
			}
			if tc.fails {
				return
			}
			var want []string
			for _, f := range append([]httpd.OverlayFile{{Path: "/etc/hostname"}}, tc.overlay...) {
				want = append(want, "."+f.Path)
			}
			for _, stale := range []string{"etc/bootd/fstab", "root/.ssh/id_ed25519"} {
				_, err := os.Stat(filepath.Join(root, stale))
				if kept := err == nil; kept != slices.Contains(want, "./"+stale) {
					t.Errorf("/%s kept %v, want %v", stale, kept, !kept)
				}
			}
			if got := readChroot(t, root, "var/lib/bootd-node/overlay.files"); got != strings.Join(want, "\n")+"\n" {
				t.Errorf("overlay.files:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
			}
		})
	}
}

// nvidia-gpu-present decides from the PCI devices the kernel lists whether this PC has an NVIDIA
// GPU that the image's driver drives (nvidia-persistenced's ExecCondition): an NVIDIA display
// device (VGA or 3D) is one once the nvidia module, loaded here, has bound it; an AMD GPU,
// NVIDIA's HDMI audio or an nForce chipset is not, and a GPU the driver does not take (a Pascal
// card under the open modules) is said on stderr without failing the unit.
func TestNvidiaGPUPresent(t *testing.T) {
	script, err := os.ReadFile("files/nvidia-cuda/nvidia-gpu-present")
	if err != nil {
		t.Fatal(err)
	}
	type pci struct {
		vendor, class string
		bound         bool // the nvidia driver takes it
	}
	var (
		intelVGA   = pci{"0x8086", "0x030000", false}
		amdVGA     = pci{"0x1002", "0x030000", false}
		nvidiaVGA  = pci{"0x10de", "0x030000", true}
		nvidia3D   = pci{"0x10de", "0x030200", true}
		pascalVGA  = pci{"0x10de", "0x030000", false}
		nvidiaHDMI = pci{"0x10de", "0x040300", false}
		nforce     = pci{"0x10de", "0x060000", false}
	)
	for _, tc := range []struct {
		name    string
		devices []pci
		want    bool
		warns   bool
	}{
		{"no PCI devices", nil, false, false},
		{"onboard Intel graphics", []pci{intelVGA}, false, false},
		{"an AMD GPU", []pci{intelVGA, amdVGA}, false, false},
		{"an nForce chipset with its HDMI audio", []pci{nforce, nvidiaHDMI}, false, false},
		{"a GeForce (VGA)", []pci{intelVGA, nvidiaVGA, nvidiaHDMI}, true, false},
		{"a data-centre GPU (3D controller)", []pci{nforce, nvidia3D}, true, false},
		{"a card the driver does not take", []pci{intelVGA, pascalVGA, nvidiaHDMI}, false, true},
		{"an old card beside a new one", []pci{pascalVGA, nvidiaVGA}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// modprobe binds each GPU the driver takes, as the nvidia module does while it loads.
			modprobe := "#!/bin/sh\n[ \"$1\" = nvidia ] || exit 1\n"
			files := map[string]string{"usr/libexec/nvidia-gpu-present": string(script), "sys/bus/pci/devices/.keep": "",
				"sys/bus/pci/drivers/nvidia/.keep": "", "dev/null": ""}
			for i, d := range tc.devices {
				dir := fmt.Sprintf("sys/bus/pci/devices/0000:%02x:00.0/", i)
				files[dir+"vendor"], files[dir+"class"] = d.vendor+"\n", d.class+"\n"
				if d.bound {
					modprobe += fmt.Sprintf("ln -s ../../drivers/nvidia /%sdriver\n", dir)
				}
			}
			files["usr/sbin/modprobe"] = modprobe
			out, err := run(t, chroot(t, files), nil, "/bin/sh", "/usr/libexec/nvidia-gpu-present")
			var exit *exec.ExitError
			if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 1) {
				t.Fatalf("nvidia-gpu-present: %v\n%s", err, out)
			}
			if got := err == nil; got != tc.want {
				t.Errorf("GPU present %v, want %v (output %q)", got, tc.want, out)
			}
			warned := strings.Contains(out, "is not driven by this image's driver") && strings.Contains(out, "compute-legacy")
			if warned != tc.warns || (!tc.warns && out != "") {
				t.Errorf("output %q, want a warning: %v", out, tc.warns)
			}
		})
	}
}

// nvidia-dkms-image builds the modules for each kernel of the image and removes what the kmod
// package's %post left for the build host's kernel: DKMS's failed build and its tree for that
// kernel, and a /lib/modules directory without a kernel. A kernel without its headers fails.
func TestNvidiaDKMSImage(t *testing.T) {
	script, err := os.ReadFile("files/nvidia-cuda/nvidia-dkms-image")
	if err != nil {
		t.Fatal(err)
	}
	const image, host = "5.14.0-570.el9.x86_64", "6.1.0-40-amd64"
	stub := map[string]string{
		"usr/libexec/nvidia-dkms-image": string(script),
		"dev/null":                      "",
		// dkms "builds" into the kernel's tree and DKMS's own; modinfo finds what was built
		"sbin/dkms": "#!/bin/sh\nk=$3\nmkdir -p /lib/modules/$k/extra /var/lib/dkms/nvidia-open/580.1/$k/x86_64/module\n" +
			"echo ko > /lib/modules/$k/extra/nvidia.ko\nln -sfn $k/x86_64 /var/lib/dkms/nvidia-open/580.1/kernel-$k-x86_64\n",
		"usr/sbin/modinfo":                                                "#!/bin/sh\n[ -e /lib/modules/$2/extra/$3.ko ]\n",
		"lib/modules/" + image + "/vmlinuz":                               "kernel",
		"usr/src/kernels/" + image + "/Makefile":                          "",
		"var/lib/dkms/nvidia-open/580.1/source/.keep":                     "",
		"var/lib/dkms/nvidia-open/580.1/build/make.log":                   "failed for the host's kernel",
		"var/lib/dkms/nvidia-open/580.1/" + host + "/x86_64/log/make.log": "",
		"lib/modules/" + host + "/extra/.keep":                            "",
	}
	t.Run("image kernel with headers", func(t *testing.T) {
		root := chroot(t, stub)
		if out, err := run(t, root, nil, "/bin/sh", "/usr/libexec/nvidia-dkms-image"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, gone := range []string{"var/lib/dkms/nvidia-open/580.1/build", "var/lib/dkms/nvidia-open/580.1/" + host, "lib/modules/" + host} {
			if exists(root, gone) {
				t.Errorf("%s is still there", gone)
			}
		}
		for _, kept := range []string{"var/lib/dkms/nvidia-open/580.1/source", "var/lib/dkms/nvidia-open/580.1/" + image,
			"var/lib/dkms/nvidia-open/580.1/kernel-" + image + "-x86_64", "lib/modules/" + image + "/extra/nvidia.ko"} {
			if !exists(root, kept) {
				t.Errorf("%s is gone", kept)
			}
		}
	})
	t.Run("image kernel without headers", func(t *testing.T) {
		files := maps.Clone(stub)
		delete(files, "usr/src/kernels/"+image+"/Makefile")
		out, err := run(t, chroot(t, files), nil, "/bin/sh", "/usr/libexec/nvidia-dkms-image")
		if err == nil || !strings.Contains(out, "no kernel-devel for kernel "+image) {
			t.Errorf("want a failure naming the kernel, got %v:\n%s", err, out)
		}
	})
}

// The lmod-easybuild layer's fix of OpenHPC 3's lmod.sh: the pipe between its two job tests
// becomes ||, so a login shell inside a Slurm job leaves the job's modules alone; a file that
// has it right already is left as it is.
func TestLmodJobSkipFix(t *testing.T) {
	l, err := spec.LoadLayer("lmod-easybuild.toml")
	if err != nil {
		t.Fatal(err)
	}
	var fix string
	for _, r := range l.Run {
		if strings.HasPrefix(r.Description, "lmod.sh") {
			fix = r.Command
		}
	}
	if fix == "" {
		t.Fatal("the layer has no lmod.sh step")
	}
	const buggy = "if [ ! -z \"$SLURM_NODELIST\" ] | [ ! -z \"$PBS_NODEFILE\" ]; then\n     return\nfi\n"
	const fixed = "if [ ! -z \"$SLURM_NODELIST\" ] || [ ! -z \"$PBS_NODEFILE\" ]; then\n     return\nfi\n"
	for _, tc := range []struct{ name, in string }{{"OpenHPC 3's lmod.sh", buggy}, {"a fixed lmod.sh", fixed}} {
		t.Run(tc.name, func(t *testing.T) {
			root := chroot(t, map[string]string{"etc/profile.d/lmod.sh": "#!/bin/sh\n" + tc.in + "export LMOD_COLORIZE=no\n"})
			if out, err := run(t, root, nil, "/bin/sh", "-c", fix); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			got, _ := os.ReadFile(filepath.Join(root, "etc/profile.d/lmod.sh"))
			if want := "#!/bin/sh\n" + fixed + "export LMOD_COLORIZE=no\n"; string(got) != want {
				t.Errorf("lmod.sh:\n%s\nwant:\n%s", got, want)
			}
			// In a job the script returns before touching the environment, outside it goes on.
			for _, env := range []struct {
				vars []string
				want string
			}{{[]string{"SLURM_NODELIST=c1"}, "skipped"}, {nil, "set up"}} {
				out, _ := run(t, root, env.vars, "/bin/sh", "-c", "f() { . /etc/profile.d/lmod.sh; echo set up; }; f || true; [ -n \"$LMOD_COLORIZE\" ] || echo skipped")
				if !strings.Contains(out, env.want) {
					t.Errorf("with %v: %q, want %q", env.vars, out, env.want)
				}
			}
		})
	}
	t.Run("no lmod.sh (a stand-in)", func(t *testing.T) {
		if out, err := run(t, chroot(t, map[string]string{"etc/.keep": ""}), nil, "/bin/sh", "-c", fix); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	})
}

// bootd-node overlay makes the lab's users with the host's shadow-utils (useradd and friends,
// as Rocky's), over two boots of a disk install, under bash (Rocky's /bin/sh) and busybox sh:
// the first makes what bootd lists and refuses what clashes with the node's own accounts (a
// name, a uid, a group), writing no keys for those; the second updates what it made, removes
// what is no longer listed with its keys (freeing its uid for another), and leaves the node's own
// accounts alone though bootd listed one of them before (its keys, which bootd gave, go). A run
// cut short before left a name on its list with only the group made, and one with nothing made:
// the first is finished, the second dropped.
func TestBootdNodeAccounts(t *testing.T) {
	const keysDir = "etc/ssh/authorized_keys.d/"
	boots := []struct {
		name, users, keys string
		wantAccounts      string            // /etc/passwd lines with uids from 1000, in order
		wantGroups        string            // /etc/group lines with gids from 1000, in order
		wantMade          string            // /var/lib/bootd-node/users
		wantKeys          map[string]string // per user with a key file
		wantWarnings      []string
	}{
		{
			name: "first boot",
			users: "# bootd: the lab's users\nalice:2001:Alice Example:/bin/bash\nbob:2002::/bin/sh\nmunge:2003::/bin/bash\n" +
				"dave:900::/bin/bash\neve:2005:Eve:/bin/bash\nfrank:2006::/bin/bash\ngrace:2007::/bin/bash\nhenry:2008::/bin/bash\n",
			keys: "# bootd: keys\nalice ssh-ed25519 AAAA-1 alice@laptop\nalice ssh-ed25519 AAAA-2 alice@desktop\nbob ssh-ed25519 BBBB bob@x\n" +
				"eve ssh-ed25519 EEEE eve@x\nmunge ssh-ed25519 MMMM m@x\ngrace ssh-ed25519 GGGG g@x\n",
			wantAccounts: "eve:x:2005:2005:Eve:/home/eve:/bin/bash\nalice:x:2001:2001:Alice Example:/home/alice:/bin/bash\n" +
				"bob:x:2002:2002::/home/bob:/bin/sh\nhenry:x:2008:2008::/home/henry:/bin/bash\n",
			wantGroups: "eve:x:2005:\nfrank:x:3000:\ngrace:x:2007:\nhenry:x:2008:\nalice:x:2001:\nbob:x:2002:\n",
			wantMade:   "alice\nbob\nhenry\n",
			wantKeys: map[string]string{"alice": "ssh-ed25519 AAAA-1 alice@laptop\nssh-ed25519 AAAA-2 alice@desktop\n",
				"bob": "ssh-ed25519 BBBB bob@x\n", "eve": "ssh-ed25519 EEEE eve@x\n", "henry": ""},
			wantWarnings: []string{"user munge has uid 900 on this node, bootd says 2003", "uid 900 (bootd's dave) is another user's",
				"group frank (gid 3000) is this node's own", "group grace (gid 2007) is this node's own"},
		},
		{
			name:         "second boot: alice changed, bob gone, carol takes his uid, eve no longer listed",
			users:        "alice:2001:Alice E.:/bin/sh\ncarol:2002:Carol:/bin/bash\n",
			keys:         "carol ssh-ed25519 CCCC carol@x\n",
			wantAccounts: "eve:x:2005:2005:Eve:/home/eve:/bin/bash\nalice:x:2001:2001:Alice E.:/home/alice:/bin/sh\ncarol:x:2002:2002:Carol:/home/carol:/bin/bash\n",
			wantGroups:   "eve:x:2005:\nfrank:x:3000:\ngrace:x:2007:\nalice:x:2001:\ncarol:x:2002:\n",
			wantMade:     "alice\ncarol\n",
			wantKeys:     map[string]string{"alice": "", "carol": "ssh-ed25519 CCCC carol@x\n"},
		},
		{
			name:         "third boot: bootd gives alice another uid, which the node's account lacks",
			users:        "alice:2011:Alice E.:/bin/sh\ncarol:2002:Carol:/bin/bash\n",
			keys:         "alice ssh-ed25519 AAAA-3 alice@x\ncarol ssh-ed25519 CCCC carol@x\n",
			wantAccounts: "eve:x:2005:2005:Eve:/home/eve:/bin/bash\nalice:x:2001:2001:Alice E.:/home/alice:/bin/sh\ncarol:x:2002:2002:Carol:/home/carol:/bin/bash\n",
			wantGroups:   "eve:x:2005:\nfrank:x:3000:\ngrace:x:2007:\nalice:x:2001:\ncarol:x:2002:\n",
			wantMade:     "alice\ncarol\n", // still bootd-node's, to remove or mend later
			wantKeys:     map[string]string{"carol": "ssh-ed25519 CCCC carol@x\n"},
			wantWarnings: []string{"user alice has uid 2001 on this node, bootd says 2011"},
		},
	}
	for _, shell := range []string{"/bin/bash", "/bin/sh"} {
		root := accountsRoot(t, map[string]string{
			"etc/passwd":  "root:x:0:0:root:/root:/bin/bash\nmunge:x:900:900:Runs munge:/run/munge:/sbin/nologin\neve:x:2005:2005:Eve:/home/eve:/bin/bash\n",
			"etc/group":   "root:x:0:\nmunge:x:900:\neve:x:2005:\nfrank:x:3000:\ngrace:x:2007:\nhenry:x:2008:\n",
			"etc/shadow":  "root:*:19000:0:99999:7:::\nmunge:!!:19000::::::\neve:!!:19000::::::\n",
			"etc/gshadow": "root:*::\nmunge:!::\neve:!::\nfrank:!::\ngrace:!::\nhenry:!::\n",
			// A run cut short: henry's group made, not henry; ivan on the list, made neither.
			"var/lib/bootd-node/users": "henry\nivan\n",
		})
		for _, boot := range boots {
			t.Run(shell+": "+boot.name, func(t *testing.T) {
				bootWithUsers(t, root, shell, boot.users, boot.keys, boot.wantWarnings)
				if got := accountLines(readChroot(t, root, "etc/passwd")); got != boot.wantAccounts {
					t.Errorf("/etc/passwd's users:\n%s\nwant:\n%s", got, boot.wantAccounts)
				}
				if got := accountLines(readChroot(t, root, "etc/group")); got != boot.wantGroups {
					t.Errorf("/etc/group's groups:\n%s\nwant:\n%s", got, boot.wantGroups)
				}
				if got := readChroot(t, root, "var/lib/bootd-node/users"); got != boot.wantMade {
					t.Errorf("made by bootd-node: %q, want %q", got, boot.wantMade)
				}
				entries, err := os.ReadDir(filepath.Join(root, keysDir))
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]string{}
				for _, e := range entries {
					got[e.Name()] = readChroot(t, root, keysDir+e.Name())
				}
				if !maps.Equal(got, boot.wantKeys) {
					t.Errorf("%s holds %q, want %q", keysDir, got, boot.wantKeys)
				}
				// sshd reads a user's key file as the user.
				checkMode(t, root, keysDir, fs.ModeDir|0o755)
				for name := range got {
					checkMode(t, root, keysDir+name, 0o644)
				}
			})
		}
	}
}

// accountsRoot is a node's root for bootd-node overlay with the host's shadow-utils, bash and
// login.defs, and files.
func accountsRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	tools := map[string]string{}
	for _, tool := range []string{"useradd", "groupadd", "usermod", "userdel"} {
		var err error
		if tools["/sbin/"+tool], err = exec.LookPath(tool); err != nil {
			t.Fatalf("%s (Debian package passwd) is needed: %v", tool, err)
		}
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	tools["/bin/bash"] = bash
	loginDefs, err := os.ReadFile("/etc/login.defs")
	if err != nil {
		t.Fatalf("the host's login.defs (Debian package login): %v", err)
	}
	all := map[string]string{
		"proc/sys/kernel/hostname": "localhost\n",
		"etc/login.defs":           string(loginDefs),
		"bin/curl":                 curlServesOverlay,
	}
	maps.Copy(all, files)
	root := nodeRoot(t, all)
	withHost(t, root, tools)
	return root
}

// checkMode fails unless root's file name has mode want (type and permissions).
func checkMode(t *testing.T, root, name string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(filepath.Join(root, name))
	if err != nil {
		t.Error(err)
	} else if fi.Mode() != want {
		t.Errorf("/%s has mode %v, want %v", name, fi.Mode(), want)
	}
}

// bootWithUsers runs bootd-node overlay under shell with the users and keys bootd would serve,
// and checks that what it says is the warnings, one line each, in order.
func bootWithUsers(t *testing.T, root, shell, users, keys string, wantWarnings []string) {
	t.Helper()
	serveOverlay(t, root,
		httpd.OverlayFile{Path: "/etc/bootd/users", Mode: 0o644, Data: []byte(users)},
		httpd.OverlayFile{Path: "/etc/bootd/authorized_keys", Mode: 0o644, Data: []byte(keys)})
	// Under a umask that would leave the files it makes unreadable to users, unless it sets modes.
	out, err := run(t, root, nil, shell, "-c", "umask 077 && exec "+shell+" /usr/libexec/bootd-node overlay")
	if err != nil {
		t.Fatalf("bootd-node overlay: %v\n%s", err, out)
	}
	said := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if out == "" {
		said = nil
	}
	if len(said) != len(wantWarnings) {
		t.Fatalf("bootd-node said:\n%s\nwant %d warnings: %q", out, len(wantWarnings), wantWarnings)
	}
	for i, w := range wantWarnings {
		if !strings.Contains(said[i], w) {
			t.Errorf("warning %d: %q, want it to say %q", i+1, said[i], w)
		}
	}
}

// bootd-node gives each account it made the subordinate ids uid*65536 (65536 of them) and no
// others, leaving out a range that overlaps another's and leaving lines by uid to the admin; odd
// lines in the files neither stop it nor count. Boots one after another on one root.
func TestBootdNodeSubIDs(t *testing.T) {
	boots := []struct {
		name, users  string
		write        map[string]string // files of the chroot replaced before the boot
		remove       []string          // files of the chroot removed before the boot
		wantSubUIDs  string            // /etc/subuid, lines sorted
		wantSubGIDs  string            // /etc/subgid, lines sorted
		wantWarnings []string
	}{
		{
			// alice's ranges come in just above xia's (useradd gives none). bob's
			// subuids end just below wu's; his subgid range waits for the admin (a line for uid
			// 2002). henry's overlap zed's (ending at his first) and yan's (starting at his last).
			name:  "first boot",
			users: "alice:2001::/bin/bash\nbob:2002::/bin/bash\nhenry:2008::/bin/bash\n",
			wantSubUIDs: "alice:131137536:65536\nbad::65536\nbob:131203072:65536\neve:100000:65536\nold:0900000:1\n" +
				"wu:131268608:3\nxia:131137535:1\nzed:131596287:2\n",
			wantSubGIDs: "2002:300000:65536\nalice:131137536:65536\neve:100000:65536\nyan:131661823:1\n",
			wantWarnings: []string{
				"/etc/subgid has a line for uid 2002, bob's: remove it",
				"/etc/subuid: henry's range 131596288-131661823 overlaps zed's: henry has none",
				"/etc/subgid: henry's range 131596288-131661823 overlaps yan's: henry has none"},
		},
		{
			name:  "second boot: bob and henry gone, carol takes bob's uid",
			users: "alice:2001::/bin/bash\ncarol:2002::/bin/bash\n",
			wantSubUIDs: "alice:131137536:65536\nbad::65536\ncarol:131203072:65536\neve:100000:65536\nold:0900000:1\n" +
				"wu:131268608:3\nxia:131137535:1\nzed:131596287:2\n",
			wantSubGIDs:  "2002:300000:65536\nalice:131137536:65536\neve:100000:65536\nyan:131661823:1\n",
			wantWarnings: []string{"/etc/subgid has a line for uid 2002, carol's: remove it"},
		},
		{
			name:         "third boot: a range of alice's own overlaps the right one, a last line without its newline",
			users:        "alice:2001::/bin/bash\n",
			write:        map[string]string{"etc/subuid": "alice:131137536:65536\nalice:131137600:100\n", "etc/subgid": "tail:131137600:1"},
			wantSubUIDs:  "alice:131137536:65536\n",
			wantSubGIDs:  "tail:131137600:1",
			wantWarnings: []string{"/etc/subgid: alice's range 131137536-131203071 overlaps tail's"},
		},
		{
			name:        "fourth boot: no /etc/subgid",
			users:       "alice:2001::/bin/bash\n",
			remove:      []string{"etc/subgid"},
			wantSubUIDs: "alice:131137536:65536\n",
			wantSubGIDs: "alice:131137536:65536\n",
		},
	}
	for _, shell := range []string{"/bin/bash", "/bin/sh"} {
		root := accountsRoot(t, map[string]string{
			"etc/passwd":  "root:x:0:0:root:/root:/bin/bash\neve:x:2005:2005:Eve:/home/eve:/bin/bash\n",
			"etc/group":   "root:x:0:\neve:x:2005:\n",
			"etc/shadow":  "root:*:19000:0:99999:7:::\neve:!!:19000::::::\n",
			"etc/gshadow": "root:*::\neve:!::\n",
			"etc/subuid":  "eve:100000:65536\nxia:131137535:1\nzed:131596287:2\nwu:131268608:3\nold:0900000:1\nbad::65536\n",
			"etc/subgid":  "eve:100000:65536\nyan:131661823:1\n2002:300000:65536\n",
		})
		for _, boot := range boots {
			t.Run(shell+": "+boot.name, func(t *testing.T) {
				for name, content := range boot.write {
					putFile(t, root, name, []byte(content), 0o644)
				}
				for _, name := range boot.remove {
					if err := os.Remove(filepath.Join(root, name)); err != nil {
						t.Fatal(err)
					}
				}
				bootWithUsers(t, root, shell, boot.users, "", boot.wantWarnings)
				for file, want := range map[string]string{"etc/subuid": boot.wantSubUIDs, "etc/subgid": boot.wantSubGIDs} {
					if got := sortedLines(readChroot(t, root, file)); got != want {
						t.Errorf("/%s:\n%s\nwant:\n%s", file, got, want)
					}
				}
				checkMode(t, root, "etc/subgid", 0o644)
			})
		}
	}
}

// sortedLines sorts a file's lines.
func sortedLines(file string) string {
	lines := strings.SplitAfter(file, "\n")
	slices.Sort(lines)
	return strings.Join(lines, "")
}

// accountLines keeps the lines of a passwd or group file with an id (its third field) from 1000
// to 59999: the lab's users and groups, not root's or the system's.
func accountLines(file string) string {
	var out strings.Builder
	for _, line := range strings.SplitAfter(file, "\n") {
		if f := strings.Split(line, ":"); len(f) > 2 {
			if id, err := strconv.Atoi(f[2]); err == nil && id >= 1000 && id < 60000 {
				out.WriteString(line)
			}
		}
	}
	return out.String()
}

// bootd-node storage gives the users bootd-node made a home on the master's /home (after
// placing it): from /etc/skel, theirs, 0700. A home that exists is left as it is, with a warning
// when it belongs to another uid (a uid given to another user before).
func TestBootdNodeHomes(t *testing.T) {
	root := storageRoot(t, masterEnv, netbootRoot, nil)
	for name, content := range map[string]string{
		"etc/passwd":               readChroot(t, root, "etc/passwd") + "alice:x:2001:2001::/home/alice:/bin/bash\nbob:x:2002:2002::/home/bob:/bin/bash\n",
		"var/lib/bootd-node/users": "alice\nbob\n",
		"etc/skel/.bashrc":         "# skel\n",
		"home/bob/notes":           "bob's own\n",
	} {
		putFile(t, root, name, []byte(content), 0o644)
	}
	out, err := storage(t, root)
	if err != nil || !strings.Contains(out, "made alice's home, /home/alice") || strings.Contains(out, "bob's home") ||
		!strings.Contains(out, "/home/bob belongs to uid 0, not to bob (2002): left as it is") {
		t.Fatalf("bootd-node storage: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		path     string
		mode     os.FileMode
		uid, gid uint32
	}{
		{"home/alice", os.ModeDir | 0o700, 2001, 2001},
		{"home/alice/.bashrc", 0o644, 2001, 2001},
		{"home/bob", os.ModeDir | 0o755, 0, 0},
	} {
		fi, err := os.Stat(filepath.Join(root, tc.path))
		if err != nil {
			t.Error(err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != tc.mode || st.Uid != tc.uid || st.Gid != tc.gid {
			t.Errorf("/%s is %v %d:%d, want %v %d:%d", tc.path, fi.Mode(), st.Uid, st.Gid, tc.mode, tc.uid, tc.gid)
		}
	}
}

// The base layer's sshd drop-in, read by the host's sshd as Rocky's reads it (an Include at the
// top of sshd_config, whose own AuthorizedKeysFile line comes after): sshd looks up a user's keys
// in /etc/ssh/authorized_keys.d/NAME as well as in their own file. sshd -T wants its privilege
// separation directory: a mount namespace of the test's own gives it one, the host's /run untouched.
func TestSSHDUsersDropIn(t *testing.T) {
	sshd := "/usr/sbin/sshd"
	if _, err := os.Stat(sshd); err != nil {
		t.Fatalf("sshd (Debian package openssh-server) is needed: %v", err)
	}
	dir := t.TempDir()
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, "hostkey")).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	dropIn, err := filepath.Abs("files/base/ssh/40-bootd-users.conf")
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "sshd_config")
	main := fmt.Sprintf("Include %s\nHostKey %s\nAuthorizedKeysFile .ssh/authorized_keys\n", dropIn, filepath.Join(dir, "hostkey"))
	if err := os.WriteFile(config, []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("unshare", "--mount", "sh", "-c",
		`mount -t tmpfs tmpfs /run && mkdir /run/sshd && exec "$0" -T -f "$1" -C user=alice,host=c1,addr=10.80.0.101`, sshd, config).CombinedOutput()
	if err != nil {
		t.Fatalf("sshd -T: %v\n%s", err, out)
	}
	const want = "authorizedkeysfile .ssh/authorized_keys /etc/ssh/authorized_keys.d/%u"
	if !slices.Contains(strings.Split(string(out), "\n"), want) {
		t.Errorf("sshd -T has no %q:\n%s", want, out)
	}
}

// TestSubIDsMapAUserNamespace: the ranges bootd-node gives a lab user are ones shadow's setuid
// newuidmap and newgidmap accept for them, as apptainer build --fakeroot needs. As alice, with
// the files bootd-node made as /etc (an overlay in a private mount namespace), util-linux's
// unshare --map-auto reads her ranges and has newuidmap and newgidmap map root to her and 65535
// ids from her range; a file chowned to 1000:1000 inside belongs to her range's 1000th outside.
func TestSubIDsMapAUserNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root for a mount namespace and setpriv: run as root, as CI does")
	}
	for _, tool := range []string{"newuidmap", "newgidmap", "unshare", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (Debian: uidmap, util-linux; scripts/setup-debian.sh installs them)", tool)
		}
	}
	root := accountsRoot(t, map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/bash\n", "etc/group": "root:x:0:\n",
		"etc/shadow": "root:*:19000:0:99999:7:::\n", "etc/gshadow": "root:*::\n",
	})
	bootWithUsers(t, root, "/bin/sh", "alice:2001::/bin/bash\n", "", nil)
	dir := t.TempDir()
	for _, f := range []string{"passwd", "group", "subuid", "subgid"} {
		putFile(t, filepath.Join(dir, "upper"), f, []byte(readChroot(t, root, "etc/"+f)), 0o644)
	}
	share := filepath.Join(dir, "share")
	for _, d := range []string{filepath.Join(dir, "work"), share} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// alice must reach share: t.TempDir makes its directories 0700.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(share, 2001, 2001); err != nil {
		t.Fatal(err)
	}
	script := `set -e
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc
exec setpriv --reuid=2001 --regid=2001 --clear-groups unshare --map-auto --map-root-user \
	sh -c 'cat /proc/self/uid_map /proc/self/gid_map && touch "$1/f" && chown 1000:1000 "$1/f"' sh "$1/share"`
	out, err := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var maps []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		maps = append(maps, strings.Join(strings.Fields(l), " "))
	}
	// uid_map, then gid_map: inside, outside, count.
	if want := []string{"0 2001 1", "1 131137536 65535", "0 2001 1", "1 131137536 65535"}; !slices.Equal(maps, want) {
		t.Errorf("maps %q, want %q", maps, want)
	}
	fi, err := os.Stat(filepath.Join(share, "f"))
	if err != nil {
		t.Fatal(err)
	}
	const outside = 131137536 + 999 // inside uid 1 is the range's first
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != outside || st.Gid != outside {
		t.Errorf("the file chowned to 1000:1000 inside is %d:%d outside, want %d:%d", st.Uid, st.Gid, outside, outside)
	}
}

// bootdDiskLib is the dracut-lib.sh stand-in for bootd-disk.sh: getarg and getargs answer from
// CMDLINE (one argument per word), info and warn print.
const bootdDiskLib = `getargs() { for a in $CMDLINE; do case "$a" in "$1"*) printf '%s ' "${a#$1}" ;; esac; done; }
getarg() { getargs "$1" | cut -d' ' -f1; }
info() { echo "INFO $*" >&2; }
warn() { echo "WARN $*" >&2; }
`

// bootdDiskTools are stand-ins for the programs bootd-disk.sh runs: udevadm answers a disk's
// properties from /fake/props/NAME, blkid its signature from /fake/sig/NAME (exit 2: nothing
// found), and mkfs.xfs, wipefs and mount record their arguments in /fake/calls.
var bootdDiskTools = map[string]string{
	"usr/sbin/udevadm":  "#!/bin/sh\n[ \"$1\" = settle ] && exit 0\nfor a in \"$@\"; do case \"$a\" in --name=*) n=${a#--name=/dev/} ;; esac; done\ncat /fake/props/$n 2>/dev/null\n",
	"usr/sbin/blkid":    "#!/bin/sh\nfor a in \"$@\"; do d=$a; done\nn=${d#/dev/}\n[ -s /fake/sig/$n ] || exit 2\ncat /fake/sig/$n\n",
	"usr/sbin/mkfs.xfs": "#!/bin/sh\necho \"mkfs.xfs $*\" >> /fake/calls\n",
	"usr/sbin/wipefs":   "#!/bin/sh\necho \"wipefs $*\" >> /fake/calls\n",
	"usr/sbin/mount":    "#!/bin/sh\necho \"mount $*\" >> /fake/calls\n",
}

// bootd-disk hands the root's writes to the one disk bootd's rule names, and never touches a
// disk it did not make unless the rule says wipe: a blank named disk is formatted (mkfs.xfs
// without -f, which itself refuses a file system), bootd's own is reused with the last boot's
// scratch set aside, a named disk holding a file system is left alone, two matching disks are
// none, and a disk no rule names sees no call at all. Without a disk the writes go to a tmpfs of
// rd.bootd.ram=.
func TestBootdDisk(t *testing.T) {
	script, err := os.ReadFile("files/base/dracut/98bootd-disk/bootd-disk.sh")
	if err != nil {
		t.Fatal(err)
	}
	ext4 := "DEVNAME=/dev/vdb\nLABEL=LABDATA\nTYPE=ext4\n"
	ours := "DEVNAME=/dev/vda\nLABEL=bootd-node\nTYPE=xfs\n"
	for _, tc := range []struct {
		name    string
		cmdline string
		sig     map[string]string // disk -> blkid's answer ("" blank)
		old     bool              // vda holds the last boot's scratch
		calls   []string          // what must be called, in order
		state   string
		cache   string // run/bootd-disk/cache.state: the cache disk taken
		says    string
	}{
		{name: "blank named disk", cmdline: "rd.bootd.ram=50% rd.bootd.disk=s1:scratch:serial=SCRATCH1",
			sig:   map[string]string{"vdb": ext4},
			calls: []string{"mkfs.xfs -q -K -L bootd-node /dev/vda", "mount -t xfs -o noatime /dev/vda /run/bootd-disk/s1"},
			state: "scratch /dev/vda s1", says: "INFO bootd: /dev/vda is blank"},
		{name: "bootd's own disk", cmdline: "rd.bootd.ram=50% rd.bootd.disk=s1:scratch:serial=SCRATCH1",
			sig: map[string]string{"vda": ours, "vdb": ext4}, old: true,
			calls: []string{"mount -t xfs -o noatime /dev/vda /run/bootd-disk/s1"},
			state: "scratch /dev/vda s1", says: "holds bootd's file system"},
		{name: "named disk holding a file system", cmdline: "rd.bootd.ram=50% rd.bootd.disk=s1:scratch:serial=OTHER2",
			sig: map[string]string{"vdb": ext4}, calls: []string{"mount -t tmpfs -o size=50%,mode=0755 bootd-rw /run/bootd-disk/ram"},
			state: "ram 50%", says: "WARN bootd: /dev/vdb matches, but holds a ext4 file system labelled LABDATA, which bootd did not make: left untouched"},
		{name: "named exactly with wipe", cmdline: "rd.bootd.ram=50% rd.bootd.disk=s1:scratch:serial=OTHER2,wipe=1",
			sig:   map[string]string{"vdb": ext4},
			calls: []string{"wipefs -a -q /dev/vdb", "mkfs.xfs -q -f -K -L bootd-node /dev/vdb", "mount -t xfs -o noatime /dev/vdb /run/bootd-disk/s1"},
			state: "scratch /dev/vdb s1", says: "wiping it, as bootd's config says"},
		{name: "two disks match", cmdline: "rd.bootd.ram=8G rd.bootd.disk=s1:scratch:model=QEMU*,minsize=1000",
			calls: []string{"mount -t tmpfs -o size=8G,mode=0755 bootd-rw /run/bootd-disk/ram"},
			state: "ram 8G", says: "WARN bootd: several disks match (/dev/vda /dev/vdb): taking none"},
		{name: "cache disk: root images on it, writes in RAM", cmdline: "rd.bootd.ram=50% rd.bootd.disk=c1:cache:serial=SCRATCH1",
			sig:   map[string]string{"vdb": ext4},
			calls: []string{"mkfs.xfs -q -K -L bootd-node /dev/vda", "mount -t xfs -o noatime /dev/vda /run/bootd-disk/c1", "mount -t tmpfs -o size=50%,mode=0755 bootd-rw /run/bootd-disk/ram"},
			state: "ram 50%", cache: "cache /dev/vda c1", says: "bootd: cache disk /dev/vda ([disks.c1]): the root image is kept on it"},
		{name: "scratch and cache on one disk, mounted once", cmdline: "rd.bootd.ram=50% rd.bootd.disk=s1:scratch+cache:serial=SCRATCH1",
			sig: map[string]string{"vda": ours, "vdb": ext4}, old: true,
			calls: []string{"mount -t xfs -o noatime /dev/vda /run/bootd-disk/s1"},
			state: "scratch /dev/vda s1", cache: "cache /dev/vda s1", says: "the root image is kept on it"},
		{name: "cache disk holding a file system bootd did not make", cmdline: "rd.bootd.ram=50% rd.bootd.disk=c1:cache:serial=OTHER2",
			sig: map[string]string{"vdb": ext4}, calls: []string{"mount -t tmpfs -o size=50%,mode=0755 bootd-rw /run/bootd-disk/ram"},
			state: "ram 50%", says: "WARN bootd: /dev/vdb matches, but holds a ext4 file system labelled LABDATA, which bootd did not make: left untouched"},
		{name: "too small", cmdline: "rd.bootd.ram=50% rd.bootd.disk=s1:scratch:serial=SCRATCH1,minsize=2000000000000",
			calls: []string{"mount -t tmpfs -o size=50%,mode=0755 bootd-rw /run/bootd-disk/ram"},
			state: "ram 50%", says: "INFO bootd: no disk for [disks.s1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{
				"sbin/bootd-disk": string(script), "lib/dracut-lib.sh": bootdDiskLib, "dev/null": "",
				"run/.keep": "", "fake/.keep": "", "proc/sys/kernel/random/uuid": "0c8a\n",
				"fake/props/vda": "ID_SERIAL=SCRATCH1\nID_MODEL=QEMU_HARDDISK\n", "fake/props/vdb": "ID_SERIAL=OTHER2\nID_MODEL=QEMU_HARDDISK\n",
				"sys/class/block/vda/size": "1048576\n", "sys/class/block/vda/removable": "0\n",
				"sys/class/block/vdb/size": "131072\n", "sys/class/block/vdb/removable": "0\n",
				"sys/class/block/vdb1/size": "1000\n", "sys/class/block/vdb1/partition": "1\n",
			}
			maps.Copy(files, bootdDiskTools)
			for disk, sig := range tc.sig {
				files["fake/sig/"+disk] = sig
			}
			if tc.old {
				files["run/bootd-disk/s1/scratch/upper/etc/last-boot"] = "x"
			}
			root := chroot(t, files)
			withBash(t, root)
			out, err := run(t, root, []string{"CMDLINE=" + tc.cmdline, "PATH=/usr/sbin:/bin:/sbin:/usr/bin"}, "/bin/bash", "/sbin/bootd-disk")
			if err != nil {
				t.Fatalf("bootd-disk: %v\n%s", err, out)
			}
			calls, _ := os.ReadFile(filepath.Join(root, "fake/calls"))
			if got := strings.Split(strings.TrimSpace(string(calls)), "\n"); !slices.Equal(got, tc.calls) {
				t.Errorf("calls:\n%s\nwant:\n%s\noutput:\n%s", calls, strings.Join(tc.calls, "\n"), out)
			}
			if state, _ := os.ReadFile(filepath.Join(root, "run/bootd-disk/state")); strings.TrimSpace(string(state)) != tc.state {
				t.Errorf("state %q, want %q\n%s", state, tc.state, out)
			}
			if !strings.Contains(out, tc.says) {
				t.Errorf("output does not say %q:\n%s", tc.says, out)
			}
			cached, _ := os.ReadFile(filepath.Join(root, "run/bootd-disk/cache.state"))
			link, _ := os.Readlink(filepath.Join(root, "run/bootd-disk/by-use/cache"))
			if f := strings.Fields(tc.cache); len(f) == 3 {
				if strings.TrimSpace(string(cached)) != tc.cache || link != "/run/bootd-disk/"+f[2]+"/images" || !exists(root, "run/bootd-disk/"+f[2]+"/images") {
					t.Errorf("cache %q, by-use/cache -> %q; want %q, /run/bootd-disk/%s/images", cached, link, tc.cache, f[2])
				}
			} else if len(cached) > 0 || link != "" {
				t.Errorf("cache %q, by-use/cache -> %q; want no cache disk", cached, link)
			}
			// It runs once a boot: a second run (bootd-verify's, after the fetch) changes nothing.
			if out2, err := run(t, root, []string{"CMDLINE=" + tc.cmdline, "PATH=/usr/sbin:/bin:/sbin:/usr/bin"}, "/bin/bash", "/sbin/bootd-disk"); err != nil {
				t.Fatalf("bootd-disk again: %v\n%s", err, out2)
			}
			if again, _ := os.ReadFile(filepath.Join(root, "fake/calls")); string(again) != string(calls) {
				t.Errorf("a second run called more:\n%s", again)
			}
			upper, _ := os.Readlink(filepath.Join(root, "run/overlayfs"))
			if want := "/run/bootd-disk/ram/upper"; strings.HasPrefix(tc.state, "scratch") {
				want = "/run/bootd-disk/s1/scratch/upper"
				if upper != want {
					t.Errorf("/run/overlayfs -> %q, want %q", upper, want)
				}
			} else if upper != want {
				t.Errorf("/run/overlayfs -> %q, want %q", upper, want)
			}
			if tc.old {
				if exists(root, "run/bootd-disk/s1/scratch/upper/etc/last-boot") {
					t.Error("the last boot's writes are still in the new upper layer")
				}
				if m, _ := filepath.Glob(filepath.Join(root, "run/bootd-disk/s1/.trash/boot-*/upper/etc/last-boot")); len(m) != 1 {
					t.Error("the last boot's scratch is not in .trash")
				}
			}
		})
	}
}
