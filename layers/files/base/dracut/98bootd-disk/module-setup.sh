#!/bin/bash
# dracut module: the writable layer of a live root, as bootd places it on the kernel command line:
# a scratch disk bootd was handed (rd.bootd.disk=), or a tmpfs of the size bootd gives
# (rd.bootd.ram=). bootd-verify's wrapper runs /sbin/bootd-disk after the root image is checked
# and before dracut's dmsquash-live-root makes the overlay (see bootd-disk.sh).

check() { return 0; }

depends() { return 0; }

installkernel() {
    instmods xfs
}

install() {
    inst_multiple blkid wipefs mkfs.xfs mount umount mkdir ln mv rm readlink udevadm cat chmod sed tr head
    inst_script "$moddir/bootd-disk.sh" /sbin/bootd-disk
    inst_hook pre-pivot 50 "$moddir/bootd-disk-tmp.sh"
}
