// Package sandbox runs what a build executes on an image tree (layer commands, rpm and its
// package scriptlets, the image's setfiles) confined by bubblewrap: its own mount, PID, IPC, UTS
// and cgroup namespaces, no network unless asked for, the sandbox's own read-only /proc, a
// private /dev with the usual nodes only, no /sys, a few capabilities, and keyrings out of reach.
//
// Why bubblewrap rather than our own clone(2) with namespaces: the set-up between the clone and
// the exec (pivot_root into a tree built of bind mounts, a fresh /proc and /dev, dropping
// capabilities, no_new_privs, a reaping PID 1 that takes every process down with it) is exactly
// what bubblewrap does, is reviewed and packaged by Debian and Rocky, and is what osbuild confines
// its stages with. Go cannot run code between fork and exec, so doing it ourselves would mean a
// re-executed helper of our own implementing the same steps.
//
// The sandbox is an independent step: rootfs and rpmcmd hand it a tree and a command, and it
// neither knows nor cares how the tree was made.
package sandbox
