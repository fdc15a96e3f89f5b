#!/bin/busybox sh
# /init of the vlab test image: bring up the boot NIC the way dracut's
# ip=/BOOTIF= arguments describe, report over the serial console, power off.
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "VLAB-INIT"

for m in $(cat /etc/vlab/modules); do
	insmod "/lib/modules/$(cat /etc/vlab/release)/$m" || echo "VLAB-INSMOD-FAILED: $m"
done

# The kernel's own messages (a NIC's probe or link, late) would otherwise cut into the report
# lines below, which the tests read whole.
dmesg -n 1
cmdline=$(cat /proc/cmdline)
echo "VLAB-CMDLINE: $cmdline"
ipspec= bootif= bootd=
for arg in $cmdline; do
	case "$arg" in
	ip=*) ipspec=${arg#ip=} ;;
	BOOTIF=*) bootif=${arg#BOOTIF=} ;;
	bootd=*) bootd=${arg#bootd=} ;;
	esac
done

# prefixlen 255.255.255.0 -> 24; a bare number is already a prefix length.
prefixlen() {
	case "$1" in *.*) ;; *) echo "$1"; return ;; esac
	p=0
	for o in $(echo "$1" | tr . ' '); do
		case "$o" in
		255) p=$((p + 8)) ;; 254) p=$((p + 7)) ;; 252) p=$((p + 6)) ;;
		248) p=$((p + 5)) ;; 240) p=$((p + 4)) ;; 224) p=$((p + 3)) ;;
		192) p=$((p + 2)) ;; 128) p=$((p + 1)) ;;
		esac
	done
	echo "$p"
}

# findiface prints the named interface, else the one with BOOTIF's MAC, else
# the first non-loopback one.
findiface() {
	for d in /sys/class/net/*; do
		n=${d##*/}
		[ "$n" = lo ] && continue
		if [ -n "$want" ]; then
			[ "$n" = "$want" ] && { echo "$n"; return 0; }
		elif [ -z "$mac" ] || [ "$(cat "$d/address")" = "$mac" ]; then
			echo "$n"
			return 0
		fi
	done
	return 1
}

# hello reports to bootd, a bounded number of times, from a privileged port as a node's
# bootd-node does (bootd knows a node by its address, that port and its MAC): the host's curl,
# since busybox's wget and nc cannot choose their port.
hello() {
	i=0
	while [ $i -lt 10 ]; do
		if resp=$(/usr/bin/curl -fsS --max-time 10 --local-port 700-1023 "$1/api/v1/hello"); then
			echo "VLAB-HELLO: $resp"
			return 0
		fi
		i=$((i + 1))
		sleep 1
	done
	echo "VLAB-HELLO-FAILED"
	return 1
}

# report posts the machine's hardware to bootd as a node's bootd-node does (slurmd -C's line, no
# GPUs), from a privileged source port (bootd's node API wants one): bootd then shows it ready.
# Only images that carry /bin/reporter do (WriteTestImages'; busybox cannot choose a source port).
report() {
	[ -x /bin/reporter ] || return 0
	hostport=${1#http://}
	hostport=${hostport%%/*}
	case "$hostport" in *:*) ;; *) hostport=$hostport:80 ;; esac
	mem=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
	body="{\"slurmd_c\":\"NodeName=$(hostname) CPUs=$(nproc) Boards=1 SocketsPerBoard=1 CoresPerSocket=$(nproc) ThreadsPerCore=1 RealMemory=$mem\",\"gpus\":[]}"
	echo "VLAB-REPORT: $(/bin/reporter "$hostport" "$body" 2>&1)"
}

if [ -n "$ipspec" ]; then
	# ip=<ip>::<gateway>:<netmask>:<hostname>:<iface>:none
	oldifs=$IFS
	IFS=:
	set -f
	set -- $ipspec
	set +f
	IFS=$oldifs
	addr=$1 gw=$3 mask=$4 host=$5 want=$6
	mac=$(echo "${bootif#01-}" | tr 'A-F-' 'a-f:')
	[ -n "$bootif" ] || mac=
	iface= i=0
	while [ $i -lt 200 ]; do
		iface=$(findiface) && break
		i=$((i + 1))
		usleep 100000
	done
	if [ -z "$iface" ]; then
		echo "VLAB-NO-IFACE: want=$want mac=$mac"
	else
		plen=$(prefixlen "$mask")
		ip addr add "$addr/$plen" dev "$iface"
		ip link set "$iface" up
		[ -n "$gw" ] && ip route add default via "$gw"
		[ -n "$host" ] && hostname "$host"
		echo "VLAB-IP: $iface $addr/$plen"
		echo "VLAB-HOSTNAME: $(hostname)"
		[ -n "$bootd" ] && hello "$bootd" && report "$bootd"
	fi
else
	echo "VLAB-NO-IP"
fi
echo "VLAB-DONE"
poweroff -f
