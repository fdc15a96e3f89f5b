#!/bin/sh
# Installed as /sbin/livenetroot by the bootd-verify dracut module. When bootd sent its fetch
# program (the extra initrd it adds for a version published by chunks, unpacked at
# /usr/lib/bootd/bootd-fetch) and the command line names the chunk index (rd.bootd.index=), the
# root image is rebuilt from chunks: those the node's peers hold and bootd's, each checked
# against its hash in the index (itself checked against rd.bootd.index.sha256=), the whole image
# then against rd.bootd.sha256=. The node serves its chunks to other nodes from then on (port
# 7480). Otherwise, or when that fails, dracut's own livenetroot downloads the whole file.
# With a cache disk bootd was handed (rd.bootd.disk=NAME:cache:..., taken by bootd-disk now,
# before the fetch), the image is kept there: a version the disk holds checked is mounted from it
# with nothing fetched, a new one is fetched into it (seeded by the versions held), and the root is
# mounted from the disk, so RAM holds only its page cache. Should the disk fail, RAM it is.
# Either way /sbin/dmsquash-live-root (bootd-verify's check) gets the image next.
type getarg >/dev/null 2>&1 || . /lib/dracut-lib.sh

[ -e /tmp/livenet.downloaded ] && exit 0

# wants_cache: some rd.bootd.disk= has the use "cache".
wants_cache() {
    for _spec in $(getargs rd.bootd.disk=); do
        _rest=${_spec#*:}
        case "+${_rest%%:*}+" in *+cache+*) return 0 ;; esac
    done
    return 1
}

fetch=/usr/lib/bootd/bootd-fetch
if [ -x "$fetch" ] && [ -n "$(getarg rd.bootd.index=)" ]; then
    # Where livenet puts the whole file: the initramfs's own tmpfs, not /run (systemd caps /run
    # at a fifth of the RAM, smaller than a CUDA image on some PCs).
    dir=/tmp/bootd
    mkdir -p "$dir"
    # bootd-disk runs once: now, when a cache disk is named, else after the image check.
    if wants_cache && [ -x /sbin/bootd-disk ]; then
        /sbin/bootd-disk
    fi
    cache=/run/bootd-disk/by-use/cache
    if [ -d "$cache" ]; then
        info "bootd: the root image from the cache disk, or fetched by chunks into it"
        # stdout is the image's path alone; the log goes to the console (stderr).
        if img=$("$fetch" root --cache "$cache" --port 7480 --stats "$dir/fetch.json") && [ -f "$img" ]; then
            : > /tmp/livenet.downloaded
            exec /sbin/dmsquash-live-root "$img"
        fi
        warn "bootd: the cache disk failed: fetching the root image into RAM"
    fi
    info "bootd: fetching the root image by chunks"
    if "$fetch" root --output "$dir/rootfs.img" --port 7480 --stats "$dir/fetch.json"; then
        : > /tmp/livenet.downloaded
        exec /sbin/dmsquash-live-root "$dir/rootfs.img"
    fi
    warn "bootd: the fetch by chunks failed: fetching the whole image"
fi
exec /sbin/livenetroot.whole "$@"
