package config

import (
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// keyLines maps every key of a TOML document, spelled as toml.Key.String
// spells it, to the line where it first appears. toml v1.6.0 records key
// positions but keeps them private (MetaData.keyInfo), so we scan. The
// document must already have parsed: the scanner trusts the syntax and
// follows only enough of it (strings, arrays, inline tables) not to mistake
// a value for a key. Its answers are hints for messages, never decisions.
func keyLines(doc string) map[string]int {
	s := &scanner{doc: doc, line: 1, lines: map[string]int{}}
	var table toml.Key
	for s.more() {
		s.skip(true)
		switch s.peek() {
		case 0:
			s.next() // a stray NUL: step over it
		case '[':
			table = s.header()
		default:
			s.keyval(table)
		}
	}
	return s.lines
}

type scanner struct {
	doc   string
	i     int
	line  int
	lines map[string]int
}

func (s *scanner) more() bool { return s.i < len(s.doc) }

func (s *scanner) peek() byte {
	if s.more() {
		return s.doc[s.i]
	}
	return 0
}

func (s *scanner) next() byte {
	c := s.peek()
	if s.more() {
		s.i++
	}
	if c == '\n' {
		s.line++
	}
	return c
}

// accept consumes c if it comes next.
func (s *scanner) accept(c byte) bool {
	if s.peek() == c && c != 0 {
		s.next()
		return true
	}
	return false
}

// skip passes blanks and comments, and newlines too if asked.
func (s *scanner) skip(newlines bool) {
	for s.more() {
		switch c := s.peek(); {
		case c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n'):
			s.next()
		case c == '#':
			for s.more() && s.peek() != '\n' {
				s.next()
			}
		default:
			return
		}
	}
}

// record notes line for k and for each of its parents not seen yet.
func (s *scanner) record(k toml.Key, line int) {
	for i := 1; i <= len(k); i++ {
		name := k[:i].String()
		if _, ok := s.lines[name]; !ok {
			s.lines[name] = line
		}
	}
}

// header reads [table] or [[array.of.tables]] and returns the table's key.
func (s *scanner) header() toml.Key {
	line := s.line
	s.next()
	double := s.accept('[')
	k := s.key()
	s.accept(']')
	if double {
		s.accept(']')
	}
	s.record(k, line)
	return k
}

// keyval reads key = value inside table.
func (s *scanner) keyval(table toml.Key) {
	line := s.line
	k := join(table, s.key())
	s.record(k, line)
	s.skip(false)
	s.accept('=')
	s.value(k)
}

func join(a, b toml.Key) toml.Key {
	return append(append(toml.Key{}, a...), b...)
}

// key reads a dotted key of bare, "basic" and 'literal' parts.
func (s *scanner) key() toml.Key {
	var k toml.Key
	for {
		s.skip(false)
		k = append(k, s.keyPart())
		s.skip(false)
		if !s.accept('.') {
			return k
		}
	}
}

func (s *scanner) keyPart() string {
	start := s.i
	switch s.peek() {
	case '"', '\'':
		s.str()
		return unquote(s.doc[start:s.i])
	}
	for isBare(s.peek()) {
		s.next()
	}
	if s.i == start {
		s.next() // not a key: move on rather than loop
	}
	return s.doc[start:s.i]
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// unquote decodes a quoted key; Go's escapes cover TOML's common ones.
func unquote(q string) string {
	if strings.HasPrefix(q, "'") {
		return strings.Trim(q, "'")
	}
	if u, err := strconv.Unquote(q); err == nil {
		return u
	}
	return strings.Trim(q, `"`)
}

// value skips one value; keys inside inline tables are recorded under k.
func (s *scanner) value(k toml.Key) {
	s.skip(false)
	switch s.peek() {
	case '"', '\'':
		s.str()
	case '[':
		s.array()
	case '{':
		s.inline(k)
	default:
		for s.more() && !strings.ContainsRune(",]}\n#", rune(s.peek())) {
			s.next()
		}
	}
}

// str skips a string of any of TOML's four kinds.
func (s *scanner) str() {
	q := s.next()
	if strings.HasPrefix(s.doc[s.i:], string([]byte{q, q})) {
		s.next()
		s.next()
		s.multiline(q)
		return
	}
	for s.more() && s.peek() != q && s.peek() != '\n' {
		if s.next() == '\\' && q == '"' {
			s.next()
		}
	}
	s.accept(q)
}

// multiline skips to the closing triple quote, and the up to two quotes
// TOML allows right before it.
func (s *scanner) multiline(q byte) {
	end := string([]byte{q, q, q})
	for s.more() && !strings.HasPrefix(s.doc[s.i:], end) {
		if s.next() == '\\' && q == '"' {
			s.next()
		}
	}
	for range 3 {
		s.accept(q)
	}
	for range 2 {
		s.accept(q)
	}
}

func (s *scanner) array() {
	s.next()
	for s.more() && !s.accept(']') {
		at := s.i
		s.skip(true)
		if s.accept(']') {
			return
		}
		s.value(nil)
		s.skip(true)
		s.accept(',')
		if s.i == at {
			s.next()
		}
	}
}

func (s *scanner) inline(k toml.Key) {
	s.next()
	for s.more() && !s.accept('}') {
		at := s.i
		s.skip(true)
		if s.accept('}') {
			return
		}
		line := s.line
		sub := join(k, s.key())
		if k == nil {
			sub = nil // inside an array: keys are not the document's
		} else {
			s.record(sub, line)
		}
		s.skip(false)
		s.accept('=')
		s.value(sub)
		s.skip(true)
		s.accept(',')
		if s.i == at {
			s.next()
		}
	}
}
