#!/bin/sh
# bootd-disk: where a live root's writes go (dracut's overlay upper layer, /run/overlayfs and
# /run/ovlwork, which dmsquash-live-root makes with mkdir -p and so follows as symlinks):
#   rd.bootd.disk=NAME:USES:KEY=VALUE,...  a local disk the admin handed over to bootd ([disks.NAME]);
#                                          with use "scratch" the writes and /tmp go there; with
#                                          "cache" it keeps the root images (USES: scratch+cache)
#   rd.bootd.ram=SIZE                      otherwise a tmpfs of that size ("50%", "8G")
# The cache disk's image directory is /run/bootd-disk/by-use/cache (bootd-fetch-root.sh roots the
# node from it), which disk it is in /run/bootd-disk/cache.state (a rule's name has no dot); the scratch's is /run/bootd-disk/by-use/scratch. It runs once per boot: before
# the fetch when a cache disk is named, else after the image check (bootd-verify-root.sh).
# A disk is taken only when exactly one disk matches every KEY (serial, wwn, model, path, minsize,
# maxsize), and only when it is blank (blkid finds no file system, partition table or other
# signature: then it gets an XFS file system labelled bootd-node), already bootd's (labelled
# bootd-node), or named exactly with wipe=1. Anything else is left untouched and said on the
# console; the writes then go to RAM. Nothing here stops the boot.
type getarg >/dev/null 2>&1 || . /lib/dracut-lib.sh

label=bootd-node
top=/run/bootd-disk

# prop DEV KEY: udev's property KEY of DEV, empty when it has none.
prop() {
    udevadm info --query=property --name="$1" 2>/dev/null | sed -n "s/^$2=//p" | head -n 1
}

# serial_is DEV SERIAL: DEV's serial number is SERIAL, as udev has it (ID_SERIAL_SHORT, ID_SERIAL)
# or the kernel (virtio and NVMe disks' serial attribute).
serial_is() {
    for _s in "$(prop "$1" ID_SERIAL_SHORT)" "$(prop "$1" ID_SERIAL)" \
        "$(cat "/sys/class/block/${1#/dev/}/serial" 2>/dev/null)" "$(cat "/sys/class/block/${1#/dev/}/device/serial" 2>/dev/null)"; do
        # The kernel pads some serials with blanks.
        _s=$(echo "$_s" | sed 's/^ *//; s/ *$//')
        [ -n "$_s" ] && [ "$_s" = "$2" ] && return 0
    done
    return 1
}

# matches DEV SELECTORS: DEV is the disk SELECTORS (KEY=VALUE,...) describe.
matches() {
    _dev=$1
    _size=$(( $(cat "/sys/class/block/${_dev#/dev/}/size" 2>/dev/null || echo 0) * 512 ))
    _named=""
    for _kv in $(echo "$2" | tr ',' ' '); do
        _k=${_kv%%=*} _v=${_kv#*=}
        case "$_k" in
            serial) serial_is "$_dev" "$_v" || return 1; _named=1 ;;
            wwn) [ "$(prop "$_dev" ID_WWN)" = "$_v" ] || return 1; _named=1 ;;
            model) case "$(prop "$_dev" ID_MODEL)" in $_v) ;; *) return 1 ;; esac ;;
            path) [ "$(readlink -f "$_v" 2>/dev/null)" = "$_dev" ] || return 1; _named=1 ;;
            minsize) [ "$_size" -ge "$_v" ] || return 1 ;;
            maxsize) [ "$_size" -le "$_v" ] || return 1 ;;
            wipe) ;;
            *) warn "bootd: rd.bootd.disk: unknown selector $_k"; return 1 ;;
        esac
    done
    # A removable disk (a USB stick) is taken only when named by serial, wwn or path.
    if [ -z "$_named" ] && [ "$(cat "/sys/class/block/${_dev#/dev/}/removable" 2>/dev/null)" = 1 ]; then
        return 1
    fi
    return 0
}

# find_disk SELECTORS: the one disk (or, by path, partition) that matches; fails when none or
# several do.
find_disk() {
    _found=""
    for _sys in /sys/class/block/*; do
        _name=${_sys##*/}
        case "$_name" in loop* | ram* | zram* | dm-* | sr* | md* | nbd* | fd*) continue ;; esac
        # Whole disks, and partitions only for a path= selector.
        if [ -e "$_sys/partition" ]; then
            case ",$1," in *,path=*) ;; *) continue ;; esac
        fi
        matches "/dev/$_name" "$1" && _found="$_found /dev/$_name"
    done
    set -- $_found
    case $# in
        1) echo "$1" ;;
        0) return 1 ;;
        *) warn "bootd: several disks match ($*): taking none"; return 1 ;;
    esac
}

# take DEV MOUNTPOINT WIPE: DEV mounted on MOUNTPOINT with bootd's file system on it, made only
# when DEV is blank (or WIPE).
take() {
    _sig=$(blkid -p -o export "$1" 2>/dev/null)
    _type=$(echo "$_sig" | sed -n 's/^TYPE=//p')
    _lab=$(echo "$_sig" | sed -n 's/^LABEL=//p')
    _pt=$(echo "$_sig" | sed -n 's/^PTTYPE=//p')
    _what=${_type:+a $_type file system}${_lab:+ labelled $_lab}
    _what=${_what:-${_pt:+a $_pt partition table}}
    _what=${_what:-a signature blkid knows}
    if [ "$_type" = xfs ] && [ "$_lab" = "$label" ]; then
        info "bootd: $1 holds bootd's file system: taking it"
    elif [ -z "$_sig" ]; then
        info "bootd: $1 is blank: making bootd's file system on it"
        # No -f: mkfs.xfs itself refuses a device that holds a file system.
        mkfs.xfs -q -K -L "$label" "$1" || { warn "bootd: mkfs.xfs $1 failed"; return 1; }
    elif [ "$3" = 1 ]; then
        warn "bootd: $1 holds $_what: wiping it, as bootd's config says (wipe = true)"
        wipefs -a -q "$1" && mkfs.xfs -q -f -K -L "$label" "$1" || { warn "bootd: wiping $1 failed"; return 1; }
    else
        warn "bootd: $1 matches, but holds $_what, which bootd did not make: left untouched (wipe it yourself, or set wipe = true in bootd's [disks] rule)"
        return 1
    fi
    mkdir -p "$2" && mount -t xfs -o noatime "$1" "$2" || { warn "bootd: cannot mount $1"; return 1; }
}

# scratch_on MOUNTPOINT: the writable layer and /tmp in a fresh directory of the disk; the last
# boot's goes to .trash (bootd-scratch-clean.service empties it once the node is up).
scratch_on() {
    if [ -e "$1/scratch" ]; then
        mkdir -p "$1/.trash" && mv "$1/scratch" "$1/.trash/boot-$$-$(cat /proc/sys/kernel/random/uuid 2>/dev/null)" ||
            { warn "bootd: cannot clear the last boot's scratch on $1"; return 1; }
    fi
    mkdir -p "$1/scratch/upper" "$1/scratch/work" "$1/scratch/tmp" && chmod 1777 "$1/scratch/tmp" || return 1
    mkdir -p "$top/by-use" && ln -sfn "$1/scratch" "$top/by-use/scratch"
}

# cache_on MOUNTPOINT: the image cache is MOUNTPOINT/images (bootd-fetch keeps the versions there).
cache_on() {
    mkdir -p "$1/images" && mkdir -p "$top/by-use" && ln -sfn "$1/images" "$top/by-use/cache"
}

# overlay_in DIR: dracut's overlay directories are DIR/upper and DIR/work.
overlay_in() {
    rm -rf /run/overlayfs /run/ovlwork
    ln -s "$1/upper" /run/overlayfs && ln -s "$1/work" /run/ovlwork
}

[ -e "$top/.ran" ] && exit 0
mkdir -p "$top" && : > "$top/.ran"
done="" cached=""
# Disks found at boot are probed by udev: wait for it (bounded) before looking.
if [ -n "$(getargs rd.bootd.disk=)" ]; then
    udevadm settle --timeout=30 || warn "bootd: udev still busy after 30 s: looking for the disk anyway"
fi
for spec in $(getargs rd.bootd.disk=); do
    name=${spec%%:*} rest=${spec#*:}
    uses=${rest%%:*} sel=${rest#*:}
    want=""
    case "+$uses+" in *+scratch+*) [ -n "$done" ] || want="scratch" ;; esac
    case "+$uses+" in *+cache+*) [ -n "$cached" ] || want="$want cache" ;; esac
    [ -n "$want" ] || continue
    if ! dev=$(find_disk "$sel"); then
        info "bootd: no disk for [disks.$name] ($sel): the root's writes and image stay in RAM"
        continue
    fi
    case ",$sel," in *,wipe=1,*) wipe=1 ;; *) wipe=0 ;; esac
    take "$dev" "$top/$name" "$wipe" || continue
    for use in $want; do
        if [ "$use" = scratch ]; then
            scratch_on "$top/$name" && overlay_in "$top/$name/scratch" || continue
            info "bootd: scratch disk $dev ([disks.$name]): the root's writes and /tmp are on it"
            echo "scratch $dev $name" > "$top/state"
            done=1
        else
            cache_on "$top/$name" || continue
            info "bootd: cache disk $dev ([disks.$name]): the root image is kept on it"
            echo "cache $dev $name" > "$top/cache.state"
            cached=1
        fi
    done
done

ram=$(getarg rd.bootd.ram=)
if [ -z "$done" ] && [ -n "$ram" ]; then
    mkdir -p "$top/ram"
    if mount -t tmpfs -o "size=$ram,mode=0755" bootd-rw "$top/ram" && mkdir -p "$top/ram/upper" "$top/ram/work"; then
        overlay_in "$top/ram"
        info "bootd: the root's writes are in RAM, at most $ram"
        echo "ram $ram" > "$top/state"
    else
        warn "bootd: cannot mount a tmpfs of $ram: the root's writes share /run"
    fi
fi
exit 0
