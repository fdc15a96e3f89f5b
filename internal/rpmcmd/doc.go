// Package rpmcmd runs the host's dnf and rpm against a foreign image root:
// a Rocky Linux tree built on a Debian host.
//
// Both tools would otherwise pick up the host's idea of the world, and on
// Debian several of those defaults are wrong for a Rocky image:
//
//   - Debian's rpm keeps its database in ~/.rpmdb (%_dbpath), so an install
//     with --root lands in <root>/root/.rpmdb, where Rocky's rpm never looks.
//     dnf has no option for it, so every command runs with HOME pointing at a
//     generated directory whose .rpmmacros sets %_dbpath /var/lib/rpm and
//     %_db_backend sqlite (what Rocky 9 uses); rpm also gets --dbpath.
//   - dnf reads the host's /etc/dnf/dnf.conf (skip_if_unavailable=True,
//     best=False on Debian) unless given -c, and looks for repo files and
//     $vars inside the installroot when a configured path happens to exist
//     there. We pass -c <workdir>/dnf.conf, and reposdir and varsdir with
//     --setopt: options given on the command line are never re-rooted.
//   - dnf always prefixes cachedir, logdir and persistdir with the
//     installroot, whatever priority they were set with, so its metadata
//     cache, logs and history end up inside Root (in the standard places);
//     the image's normalization removes them.
//   - there is no PLATFORM_ID on Debian: module_platform_id must be set
//     (platform:el9) or modular filtering misbehaves.
//   - Debian's rpm prints "RPM should not be used directly install RPM
//     packages, use Alien instead!" on every install and erase (it does not
//     refuse in rpm 4.18, and RPM_FORCE_DEBIAN has no effect): --force-debian
//     silences it.
//   - rpm's plugins (systemd_inhibit, selinux, syslog, ...) act on the host,
//     not the image: installs run with --noplugins.
//
// Commands run with a minimal, fixed environment (PATH, HOME, LANG=C,
// LC_ALL=C, TZ=UTC and SOURCE_DATE_EPOCH when set) so the host's locale and
// DNF_VAR_* variables cannot change the result. With SOURCE_DATE_EPOCH set,
// rpm 4.18 uses it for each package's install time and the transaction id,
// which makes the rpm database reproducible.
//
// Weak dependencies are always off (install_weak_deps=False): a lock names
// every package explicitly, and Recommends would make the resolved set depend
// on what the repositories happen to carry. Layers that want a recommended
// package list it.
package rpmcmd
