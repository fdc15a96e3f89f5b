// Package vcluster runs real chrony, Slurm and munge daemons for a set of cluster nodes on this
// one machine, each node in network, mount, UTS, IPC and PID namespaces of its own (host name the
// node's, network namespace named after the node and the test process, e.g. c1-4242, so that
// tests running at once never meet), from the node's rendered files: a test feeds it exactly the
// files bootd renders and checks that they bring up a working cluster. A test may stop and start
// a node's units (Node.Stop, Start, Restart) to break and mend it on purpose.
//
// A node sees the host's root file system with its /etc and /var behind an overlay whose upper
// layer holds the node's files (and the image's accounts), and fresh tmpfs on /run and /tmp;
// the daemons then read exactly the rendered paths. The harness stands in for the image and
// systemd, nothing more: it creates the accounts and the runtime directories the packages would,
// applies the "d" lines of the node's tmpfiles.d as systemd-tmpfiles does, stands in for the
// NFS exports and mounts of its /etc/exports and /etc/bootd/fstab with bind mounts (share.go), and
// starts the units the role enables the way their systemd units do (chronyd, munged as user
// munge with $OPTIONS from /etc/sysconfig/munge, "slurmctld -D -s $SLURMCTLD_OPTIONS", "slurmd
// -D -s $SLURMD_OPTIONS" from /etc/sysconfig/slurmd). It never writes a configuration file
// itself; what a shared test host requires (chronyd must not set the host's clock) goes on the
// daemon's command line, documented at the unit.
//
// The processes of a node live in its PID namespace, whose init is this same binary re-executed
// (see init.go): killing it kills everything the node ran, which is how Close tears down.
package vcluster
