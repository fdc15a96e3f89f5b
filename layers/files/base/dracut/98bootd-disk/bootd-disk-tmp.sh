#!/bin/sh
# pre-pivot: with a scratch disk, the node's /tmp is on it too (Rocky keeps /tmp on the root, whose
# writes the disk holds already; a bind of its own directory keeps /tmp apart from the root's).
if [ -d /run/bootd-disk/by-use/scratch/tmp ] && [ -d "$NEWROOT/tmp" ]; then
    mount --bind /run/bootd-disk/by-use/scratch/tmp "$NEWROOT/tmp" || warn "bootd: /tmp stays on the root: cannot bind the scratch disk's tmp"
fi
