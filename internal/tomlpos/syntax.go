package tomlpos

import (
	"errors"
	"strings"

	"github.com/BurntSushi/toml"
)

// SyntaxError locates err, returned by the TOML parser for data read from
// path, as an *Error. The line is the one the user must fix and the key
// the innermost defined on it.
func SyntaxError(path, data string, err error) *Error {
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
	key := keyOnLine(data, line)
	if key == "" {
		key = pe.LastKey
	}
	return &Error{File: path, Line: line, Key: key, Msg: "syntax error: " + pe.Message, Err: err}
}

// keyOnLine returns the key defined on line, the innermost if several.
// It beats ParseError.LastKey, which can be the enclosing table's name.
func keyOnLine(data string, line int) string {
	key := ""
	for k, l := range Lines(data) {
		if l == line && (len(k) > len(key) || len(k) == len(key) && k > key) {
			key = k
		}
	}
	return key
}
