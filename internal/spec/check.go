package spec

import (
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Checks for single values. Each says what is wrong, or returns "", so
// that table.strs can apply it to every item of an array.

// isWord reports whether every byte of s is a letter, a digit or in extra.
func isWord(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(extra, c) >= 0) {
			return false
		}
	}
	return s != ""
}

// checkName accepts layer and image names: they are also file names.
func checkName(s string) string {
	if !isWord(s, "-_") || s[0] == '-' || strings.ToLower(s) != s {
		return fmt.Sprintf("%q is not a name (want lowercase letters, digits, - and _)", s)
	}
	return ""
}

// checkPackage accepts RPM package names, not version constraints: the
// lock pins versions.
func checkPackage(s string) string {
	if !isWord(s, "-_.+") {
		return fmt.Sprintf("%q is not a package name", s)
	}
	return ""
}

func checkService(s string) string {
	if !isWord(s, "-_.@:\\") {
		return fmt.Sprintf("%q is not a systemd unit name", s)
	}
	return ""
}

// checkKernelArg refuses blanks (one item is one argument) and other control characters.
func checkKernelArg(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\r") {
		return fmt.Sprintf("%q is not one kernel argument", s)
	}
	return checkPrintable(s)
}

// checkModule accepts dnf module streams as name:stream.
func checkModule(s string) string {
	name, stream, ok := strings.Cut(s, ":")
	if !ok || !isWord(name, "-_.+") || !isWord(stream, "-_.+") {
		return fmt.Sprintf("%q is not a module stream (want name:stream, e.g. nvidia-driver:open-dkms)", s)
	}
	return ""
}

func checkRepoID(s string) string {
	if !isWord(s, "-_.:") {
		return fmt.Sprintf("%q is not a repository id (want letters, digits, - _ . :)", s)
	}
	return ""
}

// checkURL accepts the locations dnf can fetch from, refusing at load what would otherwise
// fail only when dnf (through libcurl) fetches it, with an error that names no file.
func checkURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "file") || u.Path == "" && u.Host == "":
		return fmt.Sprintf("%q is not an http, https or file URL", s)
	case u.Scheme == "file":
		return checkFileURL(s, u)
	case u.Host == "":
		return fmt.Sprintf("%q names no host (want %s://host/path)", s, u.Scheme)
	}
	return ""
}

// checkFileURL wants a file URL that libcurl reads from this machine: an absolute path and no
// host but localhost or 127.0.0.1 (curl refuses any other; imgbuild's own fetch would read
// the path and ignore the host). The usual slip is a slash short, file://srv/mirror/, which
// makes "srv" the host.
func checkFileURL(s string, u *url.URL) string {
	local := u.Host == "" || strings.EqualFold(u.Host, "localhost") || u.Host == "127.0.0.1"
	switch {
	case u.User != nil:
		return fmt.Sprintf("%q names a user, but a file URL is read on this machine (want file:///path)", s)
	case !local:
		return fmt.Sprintf("%q names host %q, but a file URL is read on this machine: want file:///%s%s (three slashes)",
			s, u.Host, u.Host, u.Path)
	case !strings.HasPrefix(u.Path, "/"):
		return fmt.Sprintf("%q has no absolute path (want file:///path)", s)
	}
	return ""
}

// checkAccount accepts user and group names as shadow-utils does by default.
func checkAccount(s string) string {
	if !isWord(s, "-_") || len(s) > 32 || !(s[0] >= 'a' && s[0] <= 'z' || s[0] == '_') || strings.ToLower(s) != s {
		return fmt.Sprintf("%q is not a user or group name", s)
	}
	return ""
}

// checkAbs wants a clean absolute path inside the image, of printable characters: a control
// character would pass here and fail at build time, far from the file that holds it.
func checkAbs(s string) string {
	if msg := checkPrintable(s); msg != "" {
		return msg
	}
	if !strings.HasPrefix(s, "/") || path.Clean(s) != s {
		return fmt.Sprintf("%q is not a clean absolute path", s)
	}
	return ""
}

// checkPrintable refuses invalid UTF-8 and control characters (newline, tab, escape, DEL, ...).
func checkPrintable(s string) string {
	if !utf8.ValidString(s) {
		return fmt.Sprintf("%q is not valid UTF-8", s)
	}
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		return fmt.Sprintf("%q holds a control character (%U)", s, []rune(s[i:])[0])
	}
	return ""
}

// notInImage are the directories whose content never reaches a node: what is mounted over them at
// boot (and, for /proc, /sys and /dev, by the build sandbox while a layer builds), or emptied by
// the build. A file written there is lost; written by a build without the sandbox's separation
// it would have landed on the build host (/proc/sys/kernel/hostname renamed the builder).
var notInImage = []struct{ dir, why string }{
	{"/proc", "the kernel's /proc is mounted there at boot; for a sysctl write a file under /etc/sysctl.d/"},
	{"/sys", "the kernel's sysfs is mounted there at boot; for a device setting write a udev rule under /etc/udev/rules.d/"},
	{"/dev", "devtmpfs is mounted there at boot; for a device node or link write a udev rule under /etc/udev/rules.d/"},
	{"/run", "systemd mounts a tmpfs there at boot; write a tmpfiles.d entry under /etc/tmpfiles.d/ instead"},
	{"/var/run", "it is /run, where systemd mounts a tmpfs at boot; write a tmpfiles.d entry under /etc/tmpfiles.d/ instead"},
	{"/var/lock", "it is /run/lock, where systemd mounts a tmpfs at boot; write a tmpfiles.d entry under /etc/tmpfiles.d/ instead"},
	{"/tmp", "the build empties /tmp"},
	{"/var/tmp", "the build empties /var/tmp"},
}

// checkImagePath wants a path a layer file can have: clean, absolute, printable, and not under a
// directory whose content never reaches a node (notInImage).
func checkImagePath(s string) string {
	if msg := checkAbs(s); msg != "" {
		return msg
	}
	if s == "/" {
		return `"/" is the image's root directory, not a file`
	}
	for _, d := range notInImage {
		if s == d.dir || strings.HasPrefix(s, d.dir+"/") {
			return fmt.Sprintf("%q is under %s, which no node sees: %s", s, d.dir, d.why)
		}
	}
	return ""
}

// checkSourcePath wants a layer file's source: a relative path inside the layers directory, of
// printable characters.
func checkSourcePath(s string) string {
	if msg := checkPrintable(s); msg != "" {
		return msg
	}
	if !filepath.IsLocal(s) {
		return fmt.Sprintf("%q is not a relative path inside the layers directory", s)
	}
	return ""
}

// checkPasswdPath wants a home or shell: a clean absolute path of letters, digits and . _ + - /
// only. It is written into /etc/passwd as it is, and /etc/passwd is read by more than the C
// library (shell scripts source lines of it, awk splits it): nothing there may separate fields
// or commands.
func checkPasswdPath(s string) string {
	if msg := checkAbs(s); msg != "" {
		return msg
	}
	if i := strings.IndexFunc(s, func(c rune) bool { return c >= 0x80 || !isWord(string(c), "._+-/") }); i >= 0 {
		return fmt.Sprintf("%q has %q, which a home or shell in /etc/passwd may not have (want letters, digits, . _ + - and /)", s, []rune(s[i:])[0])
	}
	return ""
}

// maxComment is the longest comment (GECOS) field taken.
const maxComment = 256

// checkComment wants a user's comment (the GECOS field): letters (any script), digits, blanks
// and . , _ + - @ / ' only (the apostrophe for names such as O'Brien, and Rocky's own munge
// account, "Runs Uid 'N' Gid Emporium"). ':' would split the /etc/passwd line and a newline add
// another, and ; # $ ` | & < > ( ) " and backslashes would mean something to a shell that reads
// the line: none of them belongs in a name.
func checkComment(s string) string {
	if msg := checkPrintable(s); msg != "" {
		return msg
	}
	if len(s) > maxComment {
		return fmt.Sprintf("comment of %d bytes (at most %d)", len(s), maxComment)
	}
	if i := strings.IndexFunc(s, func(c rune) bool {
		return !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != ' ' && !strings.ContainsRune(".,_+-@/'", c)
	}); i >= 0 {
		return fmt.Sprintf("%q has %q, which a comment in /etc/passwd may not have (want letters, digits, blanks and . , _ + - @ / ')", s, []rune(s[i:])[0])
	}
	return ""
}

// checkID wants a fixed uid or gid: not root's, and within 16 bits.
func checkID(n int) string {
	if n < 1 || n > 65535 {
		return fmt.Sprintf("%d is outside 1..65535", n)
	}
	return ""
}
