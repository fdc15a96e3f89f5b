package tomlpos

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/BurntSushi/toml"
)

// Lines maps every key of a TOML document, spelled as toml.Key.String
// spells it, to the line where it first appears. All the tables of an
// array of tables share one spelling, so their keys map to the first
// table's lines; [Paths] tells them apart.
//
// The document must already have parsed: the scanner trusts the syntax and
// follows only enough of it (strings, arrays, inline tables) not to mistake
// a value for a key, and stops at a key path deeper than MaxDepth. Its
// answers are hints for messages, never decisions.
func Lines(doc string) map[string]int {
	return scan(doc).lines
}

// Paths maps the path of every key and array item of a TOML document to
// its line. A path is a key as toml.Key.String spells it, with the index
// (from 0) of each array item and each table of an array of tables:
//
//	[[files]]              # files[0]
//	path = "/etc/motd"     # files[0].path
//	[[files]]              # files[1]
//	path = "/etc/issue"    # files[1].path
//	users = [{name = "a"}] # users, users[0], users[0].name
//
// In a document without arrays the paths are the keys of [Lines].
func Paths(doc string) map[string]int {
	return scan(doc).paths
}

func scan(doc string) *scanner {
	s := &scanner{doc: doc, line: 1, lines: map[string]int{}, paths: map[string]int{}, arrays: map[string]int{}}
	var table toml.Key
	var at path
	for s.more() {
		s.skip(true)
		switch s.peek() {
		case 0:
			s.next() // a stray NUL: step over it
		case '[':
			table, at = s.header()
		default:
			s.keyval(table, at)
		}
	}
	return s
}

type scanner struct {
	doc    string
	i      int
	line   int
	lines  map[string]int // toml.Key.String -> first line
	paths  map[string]int // path with indexes -> first line
	arrays map[string]int // path of an array of tables -> tables so far
	deep   *Error         // the first key deeper than MaxDepth, which ended the scan
}

// A path is a key path as [Paths] spells it, and its depth: how many keys
// and indexes it has.
type path struct {
	s     string
	depth int
}

func (p path) key(part string) path {
	k := toml.Key{part}.String()
	if p.s == "" {
		return path{k, 1}
	}
	return path{p.s + "." + k, p.depth + 1}
}

func (p path) item(i int) path { return path{p.s + "[" + strconv.Itoa(i) + "]", p.depth + 1} }

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

// recordPath notes line for p unless it was seen before, and ends the scan
// at a path deeper than MaxDepth.
func (s *scanner) recordPath(p path, line int) {
	if p.depth > MaxDepth {
		s.tooDeep(p.s, line)
		return
	}
	if _, ok := s.paths[p.s]; !ok {
		s.paths[p.s] = line
	}
}

// tooDeep notes the first key deeper than MaxDepth and ends the scan there:
// the parser's cost, and the scanner's, grows with the square of the depth.
func (s *scanner) tooDeep(key string, line int) {
	if s.deep == nil {
		s.deep = &Error{Line: line, Key: shorten(key),
			Msg: fmt.Sprintf("keys, tables and arrays nested more than %d deep", MaxDepth)}
	}
	s.i = len(s.doc)
}

// shorten keeps a key short enough for a message, cut between runes (the
// document is not yet known to be UTF-8: at worst, cut at the limit).
func shorten(key string) string {
	const most = 60
	if len(key) <= most {
		return key
	}
	n := most
	for i := most; i > most-utf8.UTFMax; i-- {
		if utf8.RuneStart(key[i]) {
			n = i
			break
		}
	}
	return key[:n] + "…"
}

// keyPath extends p by a dotted key's parts, noting line for each.
func (s *scanner) keyPath(p path, key toml.Key, line int) path {
	for _, part := range key {
		p = p.key(part)
		s.recordPath(p, line)
	}
	return p
}

// header reads [table] or [[array.of.tables]] and returns the table's key
// and path.
func (s *scanner) header() (toml.Key, path) {
	line := s.line
	s.next()
	double := s.accept('[')
	k := s.key()
	s.accept(']')
	if double {
		s.accept(']')
	}
	s.record(k, line)
	return k, s.tablePath(k, double, line)
}

// tablePath spells the path of the table a header names: a part naming an
// array of tables means its last table, except the last part of a
// [[header]], which starts a new one.
func (s *scanner) tablePath(k toml.Key, double bool, line int) path {
	var p path
	for i, part := range k {
		p = p.key(part)
		s.recordPath(p, line)
		n, isArray := s.arrays[p.s]
		switch {
		case double && i == len(k)-1:
			s.arrays[p.s] = n + 1
			p = p.item(n)
			s.recordPath(p, line)
		case isArray:
			p = p.item(n - 1)
		}
	}
	return p
}

// keyval reads key = value inside table.
func (s *scanner) keyval(table toml.Key, at path) {
	line := s.line
	key := s.key()
	k := join(table, key)
	s.record(k, line)
	at = s.keyPath(at, key, line)
	s.skip(false)
	s.accept('=')
	s.value(k, at)
}

func join(a, b toml.Key) toml.Key {
	return append(append(toml.Key{}, a...), b...)
}

// key reads a dotted key of bare, "basic" and 'literal' parts. It reads no
// more than MaxDepth+1 parts: the path the caller makes of them is then too
// deep, and ends the scan (recordPath).
func (s *scanner) key() toml.Key {
	var k toml.Key
	for len(k) <= MaxDepth {
		s.skip(false)
		k = append(k, s.keyPart())
		s.skip(false)
		if !s.accept('.') {
			break
		}
	}
	return k
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

// value skips one value; keys inside inline tables are recorded under k
// (nil inside arrays, whose keys [Lines] leaves out) and path.
func (s *scanner) value(k toml.Key, at path) {
	s.skip(false)
	switch s.peek() {
	case '"', '\'':
		s.str()
	case '[':
		s.array(at)
	case '{':
		s.inline(k, at)
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

func (s *scanner) array(at path) {
	s.next()
	for i := 0; s.more() && !s.accept(']'); i++ {
		start := s.i
		s.skip(true)
		if s.accept(']') {
			return
		}
		item := at.item(i)
		s.recordPath(item, s.line)
		s.value(nil, item)
		s.skip(true)
		s.accept(',')
		if s.i == start {
			s.next()
		}
	}
}

func (s *scanner) inline(k toml.Key, at path) {
	s.next()
	for s.more() && !s.accept('}') {
		start := s.i
		s.skip(true)
		if s.accept('}') {
			return
		}
		line := s.line
		key := s.key()
		sub := join(k, key)
		if k == nil {
			sub = nil // inside an array: keys are not the document's
		} else {
			s.record(sub, line)
		}
		subPath := s.keyPath(at, key, line)
		s.skip(false)
		s.accept('=')
		s.value(sub, subPath)
		s.skip(true)
		s.accept(',')
		if s.i == start {
			s.next()
		}
	}
}
