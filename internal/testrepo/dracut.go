package testrepo

// dracutScript is the stand-in /usr/bin/dracut. It runs in the image
// (chroot) under busybox sh and writes a gzip-compressed newc cpio holding
// busybox and a tiny /init that mounts proc, sys and dev, prints a marker
// line and the kernel command line to the console, and powers off.
//
// The call the image build makes, and the only forms it understands:
//
//	dracut --no-hostonly --reproducible --force /boot/initramfs-<rel>.img <rel>
//	dracut --regenerate-all [--force]   (one image per /lib/modules/<rel>)
//
// Other options are accepted and ignored; an option that takes an argument
// (--add x) is not supported. Without a kernel release it takes the only
// directory under /lib/modules: uname -r in a chroot is the build host's.
//
// The archive is written with printf rather than cpio, so it does not carry
// the build machine's inode numbers or times: entries are sorted, inodes
// numbered from 1, owners 0:0, mtimes SOURCE_DATE_EPOCH (0 when unset), and
// busybox gzip writes no name or time into the gzip header.
const dracutScript = `#!/bin/sh
# Stand-in dracut for imgbuild tests: writes a small, reproducible initramfs.
set -e
# Helpers by full name: the script must not depend on which applet links
# the image has.
bb=/usr/bin/busybox
force= image= kver= all=
while [ $# -gt 0 ]; do
	case "$1" in
	-f|--force) force=1 ;;
	--kver) shift; kver=$1 ;;
	--kver=*) kver=${1#--kver=} ;;
	--regenerate-all) all=1 ;;
	-*) ;;
	*) if [ -z "$image" ]; then image=$1; elif [ -z "$kver" ]; then kver=$1; fi ;;
	esac
	shift
done

mtime=${SOURCE_DATE_EPOCH:-0}
ino=0

pad() {
	n=$(( (4 - $1 % 4) % 4 ))
	while [ $n -gt 0 ]; do printf '\0'; n=$((n - 1)); done
}

# entry NAME MODE SIZE: a newc header and name; the caller writes the data.
entry() {
	ino=$((ino + 1))
	nlink=1
	[ $(( $2 & 0170000 )) -eq $((0040000)) ] && nlink=2
	printf '070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x' \
		$ino $2 0 0 $nlink $mtime $3 0 0 0 0 $(( ${#1} + 1 )) 0
	printf '%s\0' "$1"
	pad $(( 110 + ${#1} + 1 ))
}

dir() { entry "$1" $((0040755)) 0; }
file() { # NAME MODE PATH
	size=$($bb wc -c < "$3")
	entry "$1" $2 $size
	$bb cat "$3"
	pad $size
}
text() { # NAME MODE CONTENT
	size=${#3}
	entry "$1" $2 $size
	printf '%s' "$3"
	pad $size
}

init_script() {
	printf '#!/bin/sh\n'
	printf '/bin/busybox mount -t proc proc /proc\n'
	printf '/bin/busybox mount -t sysfs sysfs /sys\n'
	printf '/bin/busybox mount -t devtmpfs devtmpfs /dev\n'
	printf 'echo "imgbuild-standin-initramfs %s"\n' "$1"
	printf 'echo "cmdline: $(/bin/busybox cat /proc/cmdline)"\n'
	printf '/bin/busybox poweroff -f\n'
}

archive() { # KVER
	init=$(init_script "$1")
	dir bin
	file bin/busybox $((0100755)) /usr/bin/busybox
	text bin/sh $((0120777)) busybox
	dir dev
	text init $((0100755)) "$init
"
	dir proc
	dir sys
	ino=-1
	entry TRAILER!!! 0 0
}

build() { # IMAGE KVER
	if [ -e "$1" ] && [ -z "$force" ]; then
		echo "dracut: $1 exists, use --force to overwrite" >&2
		exit 1
	fi
	# Through a file, not a pipe: set -e does not see a failure on the
	# left of a pipe, and a truncated archive must not be installed.
	archive "$2" > "$1.cpio"
	$bb gzip -9 -c < "$1.cpio" > "$1.tmp"
	$bb rm -f "$1.cpio"
	$bb mv "$1.tmp" "$1"
	echo "dracut: wrote $1 for $2" >&2
}

if [ -n "$all" ]; then
	for d in /lib/modules/*/; do
		k=$($bb basename "$d")
		[ -d "$d" ] && build "/boot/initramfs-$k.img" "$k"
	done
	exit 0
fi
if [ -z "$kver" ]; then
	set -- /lib/modules/*/
	if [ $# -ne 1 ] || [ ! -d "$1" ]; then
		echo "dracut: give the kernel release: $# candidates under /lib/modules" >&2
		exit 1
	fi
	kver=$($bb basename "$1")
fi
[ -n "$image" ] || image=/boot/initramfs-$kver.img
build "$image" "$kver"
`
