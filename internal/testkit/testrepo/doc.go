// Package testrepo builds stand-in RPMs and local repositories for tests.
//
// There is no Rocky Linux mirror on the build machines, so tests that
// resolve and install packages with the real dnf and rpm build small
// stand-ins instead: rpmbuild packs the files a Package lists, createrepo_c
// publishes them, and the test points an image's repositories at the
// directory (file:// baseurl), the way a site with a local mirror would.
//
// Builds are reproducible: the same Packages give byte-identical RPMs (fixed
// SOURCE_DATE_EPOCH used as build time and mtime clamp, fixed build host,
// gzip payload, no debuginfo or build-id links) and identical repository
// metadata (revision and timestamps set to the same epoch).
//
// Standins maps package names to stand-ins that behave enough like Rocky's
// to build an image that netboots: busybox as bash and /bin/sh, the usrmerge
// directory layout, the Debian kernel as kernel-core with the modules a
// netboot needs, a dracut whose initramfs implements dracut's live netroot
// (root=live:<url>, checked against rd.bootd.sha256, squashfs under a tmpfs
// overlay), a systemd that runs the enabled oneshot units (bootd-node),
// the host's curl with its libraries, a slurmd that answers -C, and systemd
// unit files for service packages (see netboot.go).
package testrepo
