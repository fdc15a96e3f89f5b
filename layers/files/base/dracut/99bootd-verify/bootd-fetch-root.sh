#!/bin/sh
# Installed as /sbin/livenetroot by the bootd-verify dracut module. When bootd sent its fetch
# program (the extra initrd it adds for a version published by chunks, unpacked at
# /usr/lib/bootd/bootd-fetch) and the command line names the chunk index (rd.bootd.index=), the
# root image is rebuilt from chunks: those the node's peers hold and bootd's, each checked
# against its hash in the index (itself checked against rd.bootd.index.sha256=), the whole image
# then against rd.bootd.sha256=. The node serves its chunks to other nodes from then on (port
# 7480). Otherwise, or when that fails, dracut's own livenetroot downloads the whole file.
# Either way /sbin/dmsquash-live-root (bootd-verify's check) gets the image next.
type getarg >/dev/null 2>&1 || . /lib/dracut-lib.sh

[ -e /tmp/livenet.downloaded ] && exit 0

fetch=/usr/lib/bootd/bootd-fetch
if [ -x "$fetch" ] && [ -n "$(getarg rd.bootd.index=)" ]; then
    # Where livenet puts the whole file: the initramfs's own tmpfs, not /run (systemd caps /run
    # at a fifth of the RAM, smaller than a CUDA image on some PCs).
    dir=/tmp/bootd
    mkdir -p "$dir"
    info "bootd: fetching the root image by chunks"
    if "$fetch" root --output "$dir/rootfs.img" --port 7480 --stats "$dir/fetch.json"; then
        : > /tmp/livenet.downloaded
        exec /sbin/dmsquash-live-root "$dir/rootfs.img"
    fi
    warn "bootd: the fetch by chunks failed: fetching the whole image"
fi
exec /sbin/livenetroot.whole "$@"
