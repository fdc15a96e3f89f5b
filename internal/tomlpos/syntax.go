package tomlpos

import (
	"errors"
	"strings"

	"github.com/BurntSushi/toml"
)

// syntaxError locates err, returned by the TOML parser for data read from
// path, as an *Error. The line is the one the user must fix and the key
// the innermost defined on it, found in lines (data's keys, as [Lines]).
func syntaxError(path, data string, lines map[string]int, err error) *Error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return &Error{File: path, Msg: err.Error(), Err: err}
	}
	line := pe.Position.Line
	if st := pe.Position.Start; st >= 0 && st < len(data) {
		// The parser counts an offending newline as the next line's;
		// the user's mistake is on the line it ends.
		line = strings.Count(data[:st], "\n") + 1
	}
	key := keyOnLine(lines, line)
	if key == "" {
		key = pe.LastKey
	}
	return &Error{File: path, Line: line, Key: key, Msg: "syntax error: " + pe.Message, Err: err}
}

// keyOnLine returns the key of lines defined on line, the innermost if
// several. It beats ParseError.LastKey, which can be the enclosing table's name.
func keyOnLine(lines map[string]int, line int) string {
	key := ""
	for k, l := range lines {
		if l == line && (len(k) > len(key) || len(k) == len(key) && k > key) {
			key = k
		}
	}
	return key
}
