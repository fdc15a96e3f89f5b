#!/bin/sh
# Installed as /sbin/dmsquash-live-root by the bootd-verify dracut module: refuses a live root
# image whose sha256 differs from rd.bootd.sha256=, then hands over to dracut's own script.
type getarg >/dev/null 2>&1 || . /lib/dracut-lib.sh

want=$(getarg rd.bootd.sha256=)
if [ -n "$want" ]; then
    got=$(sha256sum "$1" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
        warn "bootd: root image $1 has sha256 $got, want $want"
        die "bootd: refusing a root image that is not the one bootd verified"
        exit 1
    fi
    info "bootd: root image sha256 ok"
fi
exec /sbin/dmsquash-live-root.unchecked "$@"
