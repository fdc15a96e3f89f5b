package spec

import (
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode"
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

// checkKernelArg refuses blanks: one item is one argument.
func checkKernelArg(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\r") {
		return fmt.Sprintf("%q is not one kernel argument", s)
	}
	return ""
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

// checkAbs wants a clean absolute path inside the image.
func checkAbs(s string) string {
	if !strings.HasPrefix(s, "/") || path.Clean(s) != s {
		return fmt.Sprintf("%q is not a clean absolute path", s)
	}
	return ""
}

// checkPasswdField refuses what would split an /etc/passwd line, into which a user's comment,
// home and shell are written as they are: ':' separates its fields, a newline its lines (another
// line could add a uid-0 account), and no other control character belongs there either.
func checkPasswdField(s string) string {
	if strings.IndexFunc(s, func(c rune) bool { return c == ':' || unicode.IsControl(c) }) >= 0 {
		return fmt.Sprintf("%q has a ':' or a control character, which /etc/passwd cannot hold", s)
	}
	return ""
}

// checkPasswdPath wants a home or shell: a clean absolute path that /etc/passwd can hold.
func checkPasswdPath(s string) string {
	if msg := checkPasswdField(s); msg != "" {
		return msg
	}
	return checkAbs(s)
}

// checkID wants a fixed uid or gid: not root's, and within 16 bits.
func checkID(n int) string {
	if n < 1 || n > 65535 {
		return fmt.Sprintf("%d is outside 1..65535", n)
	}
	return ""
}
