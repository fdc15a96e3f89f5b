package artifact

import (
	"strings"
)

// compareVersions orders version strings naturally: runs of digits compare
// as numbers, so "2026.11.21-10" sorts after "2026.11.21-9". Versions equal
// as numbers ("01" vs "1") fall back to byte order so the order is total.
func compareVersions(a, b string) int {
	x, y := a, b
	for x != "" && y != "" {
		xa, xr := splitRun(x)
		ya, yr := splitRun(y)
		if c := compareRun(xa, ya); c != 0 {
			return c
		}
		x, y = xr, yr
	}
	switch {
	case x != "":
		return 1
	case y != "":
		return -1
	}
	return strings.Compare(a, b)
}

// splitRun returns the leading run of digits or of non-digits, and the rest.
func splitRun(s string) (run, rest string) {
	digit := isDigit(s[0])
	i := 1
	for i < len(s) && isDigit(s[i]) == digit {
		i++
	}
	return s[:i], s[i:]
}

func compareRun(a, b string) int {
	if isDigit(a[0]) && isDigit(b[0]) {
		a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
		if len(a) != len(b) {
			if len(a) < len(b) {
				return -1
			}
			return 1
		}
	}
	return strings.Compare(a, b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// newer reports whether a should be preferred over b: later Created first,
// then the naturally greater version.
func newer(a, b *Image) bool {
	if c := a.Manifest.Created.Compare(b.Manifest.Created); c != 0 {
		return c > 0
	}
	return compareVersions(a.Manifest.Version, b.Manifest.Version) > 0
}
