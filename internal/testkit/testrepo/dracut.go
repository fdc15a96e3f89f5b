package testrepo

// dracutScript is the stand-in /usr/bin/dracut. It runs in the image
// (chroot) under busybox sh and writes a gzip-compressed newc cpio holding
// busybox, /dev/console, the kernel modules the image's modules.dep lists
// (kernel-core's netboot set) with that modules.dep, and as /init the
// stand-in's live netroot (liveInitScript, shipped in the package as
// /usr/lib/dracut/modules.d/99standin-live/init.sh).
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
initsrc=/usr/lib/dracut/modules.d/99standin-live/init.sh
ino=0

pad() {
	n=$(( (4 - $1 % 4) % 4 ))
	while [ $n -gt 0 ]; do printf '\0'; n=$((n - 1)); done
}

# entry NAME MODE SIZE [RDEVMAJOR RDEVMINOR]: a newc header and name; the
# caller writes the data.
entry() {
	ino=$((ino + 1))
	nlink=1
	[ $(( $2 & 0170000 )) -eq $((0040000)) ] && nlink=2
	printf '070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x' \
		$ino $2 0 0 $nlink $mtime $3 0 0 ${4:-0} ${5:-0} $(( ${#1} + 1 )) 0
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

archive() { # KVER
	moddir=lib/modules/$1
	list=$(mktemp_list)
	{
		printf '%s\n' bin bin/busybox bin/sh dev dev/console etc etc/standin-kver init proc run sys sysroot tmp
		if [ -f "/$moddir/modules.dep" ]; then
			printf '%s\n' lib lib/modules "$moddir" "$moddir/modules.dep"
			$bb sed -n 's/^\([^:]*\):.*/\1/p' "/$moddir/modules.dep" > "$list.mods"
			while read -r m; do
				d=$($bb dirname "$moddir/$m")
				while [ "$d" != "$moddir" ] && [ "$d" != . ]; do
					echo "$d"
					d=$($bb dirname "$d")
				done
				echo "$moddir/$m"
			done < "$list.mods"
			$bb rm -f "$list.mods"
		fi
	} > "$list.raw"
	LC_ALL=C $bb sort -u < "$list.raw" > "$list"
	$bb rm -f "$list.raw"
	while read -r n; do
		case "$n" in
		bin/busybox) file "$n" $((0100755)) /usr/bin/busybox ;;
		bin/sh) text "$n" $((0120777)) busybox ;;
		dev/console) entry "$n" $((0020600)) 0 5 1 ;;
		etc/standin-kver) text "$n" $((0100644)) "$1
" ;;
		init) file "$n" $((0100755)) "$initsrc" ;;
		*.ko|*.ko.*|*/modules.dep) file "$n" $((0100644)) "/$n" ;;
		*) dir "$n" ;;
		esac
	done < "$list"
	$bb rm -f "$list"
	ino=-1
	entry TRAILER!!! 0 0
}

# mktemp_list: a scratch file name next to the image being written.
mktemp_list() { echo "$image_dir/.dracut-list.$$"; }

build() { # IMAGE KVER
	if [ -e "$1" ] && [ -z "$force" ]; then
		echo "dracut: $1 exists, use --force to overwrite" >&2
		exit 1
	fi
	# Through a file, not a pipe: set -e does not see a failure on the
	# left of a pipe, and a truncated archive must not be installed.
	image_dir=$($bb dirname "$1")
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

// liveInitScript is the initramfs's /init: dracut's live netroot contract (modules network,
// livenet, dmsquash-live with rd.live.overlay.overlayfs) in one busybox script.
//
//   - load the modules (real dracut: udev loads the NIC driver by modalias; squashfs, loop and
//     overlay are loaded by dmsquash-live),
//   - bring up the NIC whose MAC BOOTIF names with the static ip=<ip>::<gw>:<mask>:<host>::none
//     and set the hostname from it,
//   - fetch root=live:<url> into /run/initramfs/live (tmpfs: the squashfs stays compressed in
//     RAM, it is not unpacked),
//   - check its sha256 against rd.bootd.sha256 and refuse to boot on a mismatch or without one
//     (with the real dracut the base layer's 99bootd-verify checks it; without one it boots
//     unchecked, which bootd never asks for: it always renders the hash),
//   - losetup it read-only and mount the squashfs on /run/rootfsbase, mount overlayfs with a
//     tmpfs upper (/run/overlayfs, /run/ovlwork) on /sysroot,
//   - move /proc, /sys, /dev and /run into /sysroot and switch_root to /sbin/init.
//
// A failure prints NODEBOOT-FATAL and powers off at once, never offering a shell: the contract
// of the real dracut with 99bootd-verify and bootd's rd.shell=0 rd.emergency=halt, where a
// refused image halts the node at once (or, without systemd in the initramfs, init exits and
// the kernel panics). Powering off rather than halting ends QEMU, so the tests need not wait.
// Progress lines start with NODEBOOT-.
const liveInitScript = `#!/bin/sh
# Stand-in dracut initramfs /init: live root over the network (see testrepo's dracut.go).
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
echo "imgbuild-standin-initramfs $(cat /etc/standin-kver)"

die() {
	echo "NODEBOOT-FATAL: $*"
	echo "dracut: FATAL: $*: refusing to continue"
	sync
	poweroff -f
	sleep 60
}
meminfo() { sed -n "s/^$1: *\\([0-9]*\\) kB/\\1/p" /proc/meminfo; }

set -f
liveurl= want= ovl= ipspec= bootif=
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	root=live:*) liveurl=${arg#root=live:} ;;
	rd.bootd.sha256=*) want=${arg#rd.bootd.sha256=} ;;
	rd.live.overlay.overlayfs|rd.live.overlay.overlayfs=1) ovl=1 ;;
	ip=*) ipspec=${arg#ip=} ;;
	BOOTIF=*) bootif=${arg#BOOTIF=} ;;
	esac
done
set +f
[ -n "$liveurl" ] || die "no root=live:<url> on the kernel command line"
[ -n "$ovl" ] || die "only rd.live.overlay.overlayfs is supported"
[ -n "$ipspec" ] || die "no ip= on the kernel command line"

loaded=
for m in e1000 virtio_net virtio_pci squashfs loop overlay; do
	if modprobe "$m" 2>/dev/null; then loaded="$loaded $m"; else echo "NODEBOOT-MODULE: $m not loaded"; fi
done
echo "NODEBOOT-MODULES:$loaded"

# ip=<ip>::<gateway>:<netmask>:<hostname>:<iface>:none
IFS=: read -r addr _ gw mask host want_if _ <<EOF_IP
$ipspec
EOF_IP
mac=$(echo "${bootif#01-}" | tr 'A-F-' 'a-f:')
prefixlen() {
	p=0
	for o in $(echo "$1" | tr . ' '); do
		case "$o" in
		255) p=$((p + 8)) ;; 254) p=$((p + 7)) ;; 252) p=$((p + 6)) ;; 248) p=$((p + 5)) ;;
		240) p=$((p + 4)) ;; 224) p=$((p + 3)) ;; 192) p=$((p + 2)) ;; 128) p=$((p + 1)) ;;
		esac
	done
	echo "$p"
}
iface= i=0
while [ -z "$iface" ] && [ $i -lt 100 ]; do
	for d in /sys/class/net/*; do
		n=${d##*/}
		[ "$n" = lo ] && continue
		if [ -n "$want_if" ]; then [ "$n" = "$want_if" ] && iface=$n
		elif [ -z "$bootif" ] || [ "$(cat "$d/address")" = "$mac" ]; then iface=$n
		fi
	done
	[ -n "$iface" ] || { i=$((i + 1)); usleep 100000; }
done
[ -n "$iface" ] || die "no interface with MAC $mac (BOOTIF)"
case "$mask" in *.*) plen=$(prefixlen "$mask") ;; *) plen=$mask ;; esac
ip link set "$iface" up
ip addr add "$addr/$plen" dev "$iface"
[ -n "$gw" ] && ip route add default via "$gw"
[ -n "$host" ] && echo "$host" > /proc/sys/kernel/hostname
echo "NODEBOOT-NET: $iface $addr/$plen host $host"

live=/run/initramfs/live
mkdir -p "$live"
img=$live/rootfs.squashfs
before=$(meminfo MemAvailable) shbefore=$(meminfo Shmem)
i=0
until timeout 600 wget -q -O "$img" "$liveurl"; do
	i=$((i + 1))
	[ $i -lt 10 ] || die "fetching $liveurl failed 10 times"
	rm -f "$img"
	sleep 2
done
after=$(meminfo MemAvailable) shafter=$(meminfo Shmem)
size=$(wc -c < "$img")
got=$(sha256sum "$img" | cut -d' ' -f1)
if [ -z "$want" ]; then
	die "no rd.bootd.sha256: refusing an unverified root image"
fi
if [ "$got" != "$want" ]; then
	die "root image $liveurl has sha256 $got, want $want"
fi
echo "NODEBOOT-ROOT: fetched $size bytes sha256 ok ($got)"
echo "NODEBOOT-MEM: MemAvailable before fetch $before kB, after $after kB; Shmem before $shbefore kB, after $shafter kB"

loopdev=$(losetup -f) || die "no free loop device"
losetup -r "$loopdev" "$img" || die "losetup $img"
mkdir -p /run/rootfsbase /run/overlayfs /run/ovlwork /sysroot
mount -t squashfs -o ro "$loopdev" /run/rootfsbase || die "mount squashfs $loopdev"
mount -t overlay -o lowerdir=/run/rootfsbase,upperdir=/run/overlayfs,workdir=/run/ovlwork LiveOS_rootfs /sysroot || die "mount overlayfs"
[ -x /sysroot/sbin/init ] || die "the root image has no /sbin/init"
echo "NODEBOOT-ROOT-MOUNTED: squashfs on $loopdev read-only, overlayfs upper on tmpfs"
for d in proc sys dev run; do
	mount --move "/$d" "/sysroot/$d" || die "move /$d"
done
echo "NODEBOOT-SWITCH-ROOT: /sbin/init"
exec switch_root /sysroot /sbin/init
`
