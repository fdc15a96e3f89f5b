#!/bin/sh
# Installed as /sbin/dmsquash-live-root by the bootd-verify dracut module: refuses a live root
# image whose sha256 differs from rd.bootd.sha256=, then hands over to dracut's own script.
# Without rd.bootd.sha256= (a hand-made boot; bootd always gives it) the image boots unchecked.
#
# A refused image stops the node at once and for good, with no shell unless rd.shell is given
# explicitly (bootd gives rd.shell=0 rd.emergency=halt):
#   - dracut's die prints the FATAL lines, marks the boot dead (/run/initramfs/.die) and, with
#     systemd in the initramfs (Rocky's), halts the machine (systemctl --force halt);
#   - without systemd, dracut's init (PID 1) runs this script in a child (initqueue -> netroot ->
#     livenetroot -> here), where die ends only the child: init would wait rd.retry (180 s) for
#     a root and then offer its emergency shell. So a job is queued first that init sources in
#     its own shell: it does rd.emergency (halt by default) and, as no halt works in such an
#     initramfs, init exits: the kernel panics ("Attempted to kill init") and the node stops
#     there (panic=<s> on the command line reboots it after <s> seconds).
type getarg >/dev/null 2>&1 || . /lib/dracut-lib.sh

# stop_init queues the job that makes dracut's script init give up (see above).
stop_init() {
    q=${hookdir:-/lib/dracut/hooks}/initqueue
    mkdir -p "$q" || return
    # shellcheck disable=SC2016 # expanded by init when it sources the job
    echo '[ -e "$job" ] && rm -f -- "$job"
trap - 0
_bootd_act=$(getarg rd.emergency)
case "$_bootd_act" in reboot | poweroff) ;; *) _bootd_act=halt ;; esac
warn "bootd: root image refused: stopping the node ($_bootd_act), no shell"
command -v "$_bootd_act" >/dev/null 2>&1 && "$_bootd_act"
warn "bootd: init gives up: the kernel stops the node"
exit 1' > "/tmp/bootd-refused.$$" && mv -f "/tmp/bootd-refused.$$" "$q/bootd-refused.sh"
    : >> "$q/work"
}

# refuse stops the boot: why on the console, then dracut gives up at once.
refuse() {
    warn "bootd: $*"
    [ -n "$DRACUT_SYSTEMD" ] || stop_init
    die "bootd: refusing a root image that is not the one bootd verified"
    exit 1
}

want=$(getarg rd.bootd.sha256=)
if [ -n "$want" ]; then
    sum=$(sha256sum < "$1") || refuse "cannot read the root image $1"
    got=${sum%% *}
    [ "$got" = "$want" ] || refuse "root image $1 has sha256 $got, want $want"
    info "bootd: root image sha256 ok"
fi
# The root's writable layer (bootd-disk module): a scratch disk or a sized tmpfs, before dracut's
# script makes the overlay in it.
[ -x /sbin/bootd-disk ] && /sbin/bootd-disk
exec /sbin/dmsquash-live-root.unchecked "$@"
