package config

import "github.com/labcluster/gpucluster/internal/tomlpos"

// keyLines maps every key of a TOML document, spelled as toml.Key.String
// spells it, to the line where it first appears (see [tomlpos.Lines]).
func keyLines(doc string) map[string]int { return tomlpos.Lines(doc) }

// isBare reports a character TOML allows in a bare key: letters, digits,
// _ and -, a safe alphabet for names too.
func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
