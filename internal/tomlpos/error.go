package tomlpos

import "fmt"

// Error is an error located as precisely as known: the file and line a
// value came from, and its key (dotted, as in network.subnet, or a path
// such as files[0].mode; see [Paths]).
type Error struct {
	File string // "" when the value did not come from a file
	Line int    // 0 when unknown
	Key  string // "" for errors not about one key, e.g. some syntax errors
	Msg  string
	Err  error // underlying error, if any
}

// Error formats as file:line: key: msg, leaving out the parts not known.
func (e *Error) Error() string {
	s := ""
	switch {
	case e.File != "" && e.Line > 0:
		s = fmt.Sprintf("%s:%d: ", e.File, e.Line)
	case e.File != "":
		s = e.File + ": "
	case e.Line > 0:
		s = fmt.Sprintf("line %d: ", e.Line)
	}
	if e.Key != "" {
		s += e.Key + ": "
	}
	return s + e.Msg
}

// Unwrap returns the underlying error, e.g. the TOML parser's.
func (e *Error) Unwrap() error { return e.Err }
