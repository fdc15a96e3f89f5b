#!/bin/bash
# dracut module: check the live root image against the hash bootd put on the kernel command
# line (rd.bootd.sha256=) before it is mounted. livenet downloads root=live:<url> and hands the
# file to /sbin/dmsquash-live-root; this module puts a checking wrapper in its place. A refused
# image stops the node at once (see bootd-verify-root.sh). It also puts bootd-fetch-root.sh in
# livenetroot's place: the root by chunks when bootd sent its fetch program, else the whole file.

check() { return 0; }

depends() { echo dmsquash-live livenet; }

install() {
    inst_multiple sha256sum mkdir mv
    if [ -e "$initdir/sbin/dmsquash-live-root" ]; then
        mv "$initdir/sbin/dmsquash-live-root" "$initdir/sbin/dmsquash-live-root.unchecked"
    fi
    inst_script "$moddir/bootd-verify-root.sh" /sbin/dmsquash-live-root
    if [ -e "$initdir/sbin/livenetroot" ]; then
        mv "$initdir/sbin/livenetroot" "$initdir/sbin/livenetroot.whole"
    fi
    inst_script "$moddir/bootd-fetch-root.sh" /sbin/livenetroot
}
