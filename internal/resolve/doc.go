// Package resolve turns an image's ordered layers into a lock file with the
// real dnf, reads and writes lock files, and fetches locked packages into a
// content-addressed cache.
//
// Locking resolves cumulatively in one scratch, empty installroot: for
// layer i, dnf installs layer i's packages together with the exact NEVRAs
// locked for layers 1..i-1, which stand for the earlier layers' package
// lists. So a later layer can never change what an earlier one got (if it
// needs another version, dnf fails and the error says so, rather than the
// base layer silently changing); dnf downloads the whole transaction
// (--downloadonly) and layer i gets the packages that are new. Each
// downloaded file's header gives its NEVRA and its bytes the sha256; one dnf
// repoquery after the last layer gives every package's repository and its
// location relative to the repository's baseurl, so a site mirror with
// another baseurl serves the same locations. dnf has checked signatures of
// gpgcheck repos by then: the lock pins what was verified.
//
// Fetch downloads baseurl + location for each locked package into
// <cache>/sha256/<hex>.rpm, checking the sha256 before the file enters the
// cache (written to a temporary name, renamed when it matches). A cached
// file is hashed again before each use; one that no longer matches (a
// tampered or damaged cache) is deleted and fetched again, so a build uses
// exactly the locked bytes or fails. A mirror that sends nothing for a
// minute (headers or body) fails the download, naming the package and the
// URL (httpget.go); a slow one that keeps sending is waited for.
package resolve
