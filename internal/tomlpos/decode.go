package tomlpos

import (
	"fmt"

	"github.com/BurntSushi/toml"
)

// Limits on a document, checked before the parser sees it. Our files are a
// few kilobytes and a few levels deep; far larger ones are mistakes (a
// binary given as --site, a generated a.a.a… key).
//
// The depth limit is also a defence: BurntSushi/toml v1.6.0 spends time and
// memory growing with the square of a dotted key's or header's parts
// (BurntSushi/toml#496: a 60 KB key takes 15 GB), fixed upstream after the
// last release.
const (
	MaxSize  = 1 << 20 // bytes
	MaxDepth = 32      // keys and array indexes in any key path
)

// A Doc is what Decode learnt of a document besides its values.
type Doc struct {
	toml.MetaData
	Lines map[string]int // as [Lines] returns them
	Paths map[string]int // as [Paths] returns them
}

// Decode parses data, read from file, into v as toml.Decode does, once
// data is within MaxSize and MaxDepth. Every error is an *Error located in
// file.
func Decode(file, data string, v any) (Doc, error) {
	s, err := check(file, data)
	if err != nil {
		return Doc{}, err
	}
	md, err := toml.Decode(data, v)
	if err != nil {
		return Doc{}, syntaxError(file, data, s.lines, err)
	}
	return Doc{MetaData: md, Lines: s.lines, Paths: s.paths}, nil
}

// check scans data, read from file, and returns an *Error if it is larger
// than MaxSize or has a key path deeper than MaxDepth (the first such, with
// its line).
func check(file, data string) (*scanner, error) {
	if len(data) > MaxSize {
		return nil, &Error{File: file, Msg: fmt.Sprintf("%d bytes is too large for this file (at most %d)", len(data), MaxSize)}
	}
	s := scan(data)
	if s.deep != nil {
		s.deep.File = file
		return nil, s.deep
	}
	return s, nil
}
