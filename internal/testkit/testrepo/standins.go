package testrepo

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Busybox is the static busybox of Debian's busybox-static package: the
// whole userland of the stand-in bash.
const Busybox = "/bin/busybox"

// KernelFiles is the host kernel that the stand-in kernel-core ships.
type KernelFiles struct {
	Release    string // e.g. 6.1.0-56-amd64
	Vmlinuz    string // host path of the kernel image
	ModulesDir string // host /lib/modules/<release>, optional
}

// HostKernel finds the newest Debian kernel installed on the host
// (/boot/vmlinuz-*). Not uname -r: the running kernel of a container or VM
// usually has no files on the host.
func HostKernel() (KernelFiles, error) {
	matches, err := filepath.Glob("/boot/vmlinuz-*")
	if err != nil || len(matches) == 0 {
		return KernelFiles{}, fmt.Errorf("no /boot/vmlinuz-* on this host (install linux-image-amd64)")
	}
	sort.Strings(matches)
	vmlinuz := matches[len(matches)-1]
	rel := strings.TrimPrefix(filepath.Base(vmlinuz), "vmlinuz-")
	k := KernelFiles{Release: rel, Vmlinuz: vmlinuz}
	if st, err := os.Stat(filepath.Join("/lib/modules", rel)); err == nil && st.IsDir() {
		k.ModulesDir = filepath.Join("/lib/modules", rel)
	}
	return k, nil
}

// serviceUnits names the units of service packages whose unit is not
// their own name (see unitsFor).
var serviceUnits = map[string][]string{
	"chrony":          {"chronyd"},
	"munge":           {"munge"},
	"nfs-utils":       {"nfs-server", "rpcbind"},
	"openssh-server":  {"sshd"},
	"slurm":           nil,
	"slurm-slurmd":    {"slurmd"},
	"slurm-slurmctld": {"slurmctld"},
	"slurm-slurmdbd":  {"slurmdbd"},
	// OpenHPC's names end in -ohpc; their units are Slurm's own.
	"slurm-ohpc":           nil,
	"slurm-slurmd-ohpc":    {"slurmd"},
	"slurm-slurmctld-ohpc": {"slurmctld"},
	"slurm-slurmdbd-ohpc":  {"slurmdbd"},
	"mariadb-server":       {"mariadb"},
	"fail2ban":             {"fail2ban"},
	"NetworkManager":       {"NetworkManager"},
	// nvidia-persistenced ends in "d" but is one word: the rule below would cut nothing.
	"nvidia-persistenced": {"nvidia-persistenced"},
	"grafana":             {"grafana-server"},
	// The monitoring layer runs these with units of its own (lab-node-exporter, lab-prometheus).
	"golang-github-prometheus":               nil,
	"golang-github-prometheus-node-exporter": nil,
}

// unitsFor returns the units a stand-in ships: the table's, or, for a name
// whose last dash-separated part ends in "d" (slurm-slurmd, chronyd), that
// part.
func unitsFor(name string) []string {
	if u, ok := serviceUnits[name]; ok {
		return u
	}
	last := name[strings.LastIndex(name, "-")+1:]
	if len(last) > 2 && strings.HasSuffix(last, "d") {
		return []string{last}
	}
	return nil
}

// Standins returns a stand-in for each name, sorted by name, plus the base
// packages the stand-ins depend on (filesystem, setup, bash, kernel-core)
// when names does not list them, so the result is a closed repository.
//
// Every stand-in except setup and filesystem requires filesystem, as every
// Rocky package does through glibc: rpm then lays out /bin -> usr/bin and
// friends before anything is installed through those paths.
func Standins(names []string, kernel KernelFiles) []Package {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []Package
	for queue := sortedKeys(want); len(queue) > 0; {
		n := queue[0]
		queue = queue[1:]
		p := Standin(n, kernel)
		out = append(out, p)
		for _, r := range p.Requires {
			dep := strings.Fields(r)[0]
			if _, known := overrides[dep]; known && !want[dep] {
				want[dep] = true
				queue = append(queue, dep)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// overrides are the stand-ins that are more than an empty package.
var overrides = map[string]func(KernelFiles) Package{
	"setup":        func(KernelFiles) Package { return setupPkg() },
	"filesystem":   func(KernelFiles) Package { return filesystemPkg() },
	"bash":         func(KernelFiles) Package { return bashPkg() },
	"kernel-core":  kernelCorePkg,
	"kernel":       kernelPkg,
	"dracut":       func(KernelFiles) Package { return dracutPkg() },
	"kernel-devel": kernelDevelPkg,
	"dkms":         func(KernelFiles) Package { return dkmsPkg() },
	"kmod":         func(KernelFiles) Package { return kmodPkg() },
	"kmod-nvidia-open-dkms": func(KernelFiles) Package {
		return nvidiaKmodPkg("kmod-nvidia-open-dkms", "nvidia-open")
	},
	"kmod-nvidia-latest-dkms": func(KernelFiles) Package {
		return nvidiaKmodPkg("kmod-nvidia-latest-dkms", "nvidia")
	},
	"curl":              func(KernelFiles) Package { return curlPkg() },
	"shadow-utils":      func(KernelFiles) Package { return shadowUtilsPkg() },
	"tpm2-tools":        func(KernelFiles) Package { return tpm2ToolsPkg() },
	"openssl":           func(KernelFiles) Package { return opensslPkg() },
	"systemd":           func(KernelFiles) Package { return systemdPkg() },
	"slurm-slurmd-ohpc": func(KernelFiles) Package { return slurmdPkg() },
	"slurm-ohpc":        func(KernelFiles) Package { return slurmPkg() },

	"policycoreutils":         func(KernelFiles) Package { return policycoreutilsPkg() },
	"selinux-policy-targeted": func(KernelFiles) Package { return selinuxPolicyPkg() },
}

// Standin returns the stand-in for one name: the override table's, or a
// package with a marker file, the unit files unitsFor names, and a
// dependency on filesystem.
func Standin(name string, kernel KernelFiles) Package {
	if f, ok := overrides[name]; ok {
		return f(kernel)
	}
	return Package{
		Name:     name,
		Requires: []string{"filesystem"},
		Files:    map[string]string{"/usr/share/standin/" + name: name + "\n"},
		Units:    unitsFor(name),
	}
}

func setupPkg() Package {
	return Package{
		Name: "setup",
		Files: map[string]string{
			"/etc/passwd":  "root:x:0:0:root:/root:/bin/bash\n",
			"/etc/group":   "root:x:0:\n",
			"/etc/shadow":  "root:!!:19000:0:99999:7:::\n",
			"/etc/gshadow": "root:::\n",
			"/etc/shells":  "/bin/sh\n/bin/bash\n/usr/bin/sh\n/usr/bin/bash\n",
			"/etc/hosts":   "127.0.0.1   localhost localhost.localdomain\n::1         localhost localhost.localdomain\n",
		},
		Modes: map[string]fs.FileMode{"/etc/shadow": 0, "/etc/gshadow": 0},
	}
}

// filesystemPkg is Rocky 9's layout: usrmerge symlinks and the top-level
// directories with their modes.
func filesystemPkg() Package {
	dirs := map[string]fs.FileMode{
		"/boot": 0o555, "/dev": 0o755, "/etc": 0o755, "/home": 0o755, "/media": 0o755,
		"/mnt": 0o755, "/opt": 0o755, "/proc": 0o555, "/root": 0o550, "/run": 0o755,
		"/srv": 0o755, "/sys": 0o555, "/tmp": 0o777 | fs.ModeSticky, "/usr": 0o755,
		"/usr/bin": 0o755, "/usr/sbin": 0o755, "/usr/lib": 0o555, "/usr/lib64": 0o555,
		"/usr/libexec": 0o755, "/usr/share": 0o755, "/usr/local": 0o755,
		"/var": 0o755, "/var/lib": 0o755, "/var/log": 0o755, "/var/cache": 0o755,
		"/var/spool": 0o755, "/var/tmp": 0o777 | fs.ModeSticky,
		"/usr/lib/modules": 0o755, "/usr/lib/systemd": 0o755, "/usr/lib/systemd/system": 0o755,
		"/etc/systemd": 0o755, "/etc/systemd/system": 0o755,
	}
	return Package{
		Name:     "filesystem",
		Version:  "3.16",
		Release:  "2.el9",
		Requires: []string{"setup"},
		Dirs:     dirs,
		Symlinks: map[string]string{
			"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64",
			"/var/run": "../run", "/var/lock": "../run/lock",
		},
	}
}

// bashPkg is busybox as bash and sh. Busybox has no "bash" applet, so bash
// is a script that execs busybox's sh; sh is a symlink (an applet name).
// The common applets get /usr/bin links (see applets).
func bashPkg() Package {
	links := map[string]string{"/usr/bin/sh": "busybox"}
	for _, a := range applets {
		links["/usr/bin/"+a] = "busybox"
	}
	return Package{
		Name:     "bash",
		Version:  "5.1.8",
		Release:  "9.el9",
		Arch:     "x86_64",
		Requires: []string{"filesystem"},
		Provides: []string{"/bin/sh", "/bin/bash", "/usr/bin/sh", "/usr/bin/bash"},
		Binaries: map[string]string{"/usr/bin/busybox": Busybox},
		Files:    map[string]string{"/usr/bin/bash": "#!/usr/bin/busybox sh\nexec /usr/bin/busybox sh \"$@\"\n"},
		Symlinks: links,
	}
}

// applets get a /usr/bin link to busybox: Debian's busybox-static runs
// only a few applets without one (no standalone shell), so a scriptlet
// calling wc or sed needs the link. Only what coreutils, grep, sed, gawk,
// gzip, tar, cpio, findutils and which provide in Rocky: no init, mount or
// rpm that would pretend to be something else.
var applets = []string{
	"awk", "basename", "cat", "chgrp", "chmod", "chown", "cksum", "cmp", "cp", "cpio",
	"cut", "date", "dd", "df", "diff", "dirname", "du", "echo", "egrep", "env", "expr",
	"false", "fgrep", "find", "grep", "gunzip", "gzip", "head", "id", "ln", "ls", "md5sum",
	"mkdir", "mkfifo", "mknod", "mktemp", "mv", "nproc", "od", "printf", "pwd", "readlink",
	"realpath", "rm", "rmdir", "sed", "seq", "sha256sum", "sleep", "sort", "stat", "sync", "tail",
	"tar", "tee", "test", "touch", "tr", "true", "truncate", "uname", "uniq", "wc", "which",
	"xargs", "yes", "zcat",
	// hostname is Rocky's own "hostname" package, which no layer names; bootd-node calls it
	// (see the netboot e2e test's report), so the stand-in userland has it.
	"hostname",
}

// kernelVersion splits a Debian release (6.1.0-56-amd64) into an RPM
// version and release (6.1.0, 56.el9).
func kernelVersion(rel string) (string, string) {
	v, rest, _ := strings.Cut(rel, "-")
	r, _, _ := strings.Cut(rest, "-")
	if r == "" {
		r = "1"
	}
	return v, r + ".el9"
}

// kernelCorePkg ships the host kernel where Rocky's kernel-core has it
// (/lib/modules/<rel>/vmlinuz) and, because no kernel-install runs in the
// test images, also as /boot/vmlinuz-<rel> (a hard link: stored once).
// The small modules.* indexes come along, and the modules a netboot needs
// (NetbootModules and their dependencies) with a modules.dep listing exactly
// those, so the initramfs can modprobe them.
func kernelCorePkg(k KernelFiles) Package {
	v, r := kernelVersion(k.Release)
	mod := "/lib/modules/" + k.Release
	p := Package{
		Name: "kernel-core", Version: v, Release: r, Arch: "x86_64",
		Requires: []string{"filesystem"},
		Binaries: map[string]string{mod + "/vmlinuz": k.Vmlinuz, "/boot/vmlinuz-" + k.Release: k.Vmlinuz},
		Files:    map[string]string{mod + "/modules.dep": ""},
		Dirs:     map[string]fs.FileMode{mod: 0o755},
	}
	if k.ModulesDir != "" {
		for _, f := range []string{"modules.order", "modules.builtin", "modules.builtin.modinfo"} {
			if data, err := os.ReadFile(filepath.Join(k.ModulesDir, f)); err == nil {
				p.Files[mod+"/"+f] = string(data)
			}
		}
		addKernelModules(&p, k)
	}
	return p
}

// kernelPkg is the meta package, as in Rocky.
func kernelPkg(k KernelFiles) Package {
	v, r := kernelVersion(k.Release)
	return Package{
		Name: "kernel", Version: v, Release: r, Arch: "x86_64",
		Requires: []string{"filesystem", "kernel-core = " + v + "-" + r},
	}
}

func dracutPkg() Package {
	return Package{
		Name:     "dracut",
		Version:  "057",
		Release:  "21.el9",
		Requires: []string{"filesystem", "bash"},
		Files: map[string]string{"/usr/bin/dracut": dracutScript,
			"/usr/lib/dracut/modules.d/99standin-live/init.sh": liveInitScript},
	}
}
