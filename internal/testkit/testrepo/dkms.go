package testrepo

import "io/fs"

// The DKMS chain of the nvidia-cuda (and nvidia-legacy) layer, in miniature: the kmod package
// (kmod-nvidia-open-dkms, kmod-nvidia-latest-dkms) ships module sources with a dkms.conf,
// kernel-devel the headers directory DKMS builds against, dkms "builds" each module
// named in a dkms.conf into /lib/modules/<kernel>/extra, and kmod's modinfo finds it there or
// fails. So the layer's check that the module exists for the image's own kernel really checks.

func kernelDevelPkg(k KernelFiles) Package {
	v, r := kernelVersion(k.Release)
	return Package{
		Name: "kernel-devel", Version: v, Release: r, Arch: "x86_64",
		Requires: []string{"filesystem"},
		Files:    map[string]string{"/usr/src/kernels/" + k.Release + "/Makefile": "# stand-in kernel headers for " + k.Release + "\n"},
	}
}

// nvidiaKmodPkg is a kmod package whose DKMS module is called module (nvidia-open for the open
// flavour, nvidia for the proprietary one, as NVIDIA names them).
func nvidiaKmodPkg(name, module string) Package {
	return Package{
		Name: name, Requires: []string{"filesystem", "dkms"},
		Files: map[string]string{"/usr/src/" + module + "-1.0/dkms.conf": "PACKAGE_NAME=" + module + "\nBUILT_MODULE_NAME[0]=\"nvidia\"\nBUILT_MODULE_NAME[1]=\"nvidia-uvm\"\n"},
	}
}

const dkmsScript = `#!/bin/sh
# stand-in dkms: "dkms autoinstall -k KERNEL" builds every module a dkms.conf names.
set -eu
[ "${1:-}" = autoinstall ] && [ "${2:-}" = -k ] && [ -n "${3:-}" ] || { echo "usage: dkms autoinstall -k KERNEL" >&2; exit 2; }
k=$3
[ -d "/usr/src/kernels/$k" ] || { echo "dkms: no kernel headers for $k" >&2; exit 1; }
mkdir -p "/lib/modules/$k/extra"
for conf in /usr/src/*/dkms.conf; do
  [ -e "$conf" ] || continue
  for m in $(sed -n 's/^BUILT_MODULE_NAME\[[0-9]*\]="\(.*\)"/\1/p' "$conf"); do
    echo "stand-in module $m built for $k" > "/lib/modules/$k/extra/$m.ko"
    echo "dkms: built $m for $k"
  done
done
`

func dkmsPkg() Package {
	return Package{
		Name: "dkms", Requires: []string{"filesystem", "bash"},
		Files: map[string]string{"/usr/sbin/dkms": dkmsScript},
		Modes: map[string]fs.FileMode{"/usr/sbin/dkms": 0o755},
	}
}

const modinfoScript = `#!/bin/sh
# stand-in modinfo: "modinfo [-k KERNEL] NAME" succeeds when the module file exists.
k=$(uname -r)
if [ "${1:-}" = -k ]; then k=$2; shift 2; fi
f=$(find "/lib/modules/$k" -name "$1.ko*" 2>/dev/null | head -n 1)
[ -n "$f" ] || { echo "modinfo: ERROR: Module $1 not found." >&2; exit 1; }
echo "filename:       $f"
`

func kmodPkg() Package {
	return Package{
		Name: "kmod", Arch: "x86_64", Requires: []string{"filesystem", "bash"},
		Files: map[string]string{"/usr/sbin/modinfo": modinfoScript},
		Modes: map[string]fs.FileMode{"/usr/sbin/modinfo": 0o755},
	}
}
