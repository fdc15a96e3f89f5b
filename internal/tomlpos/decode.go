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

// Decode parses data, read from file, into v as toml.Decode does, once
// data is within MaxSize and MaxDepth. Every error is an *Error located in
// file.
func Decode(file, data string, v any) (toml.MetaData, error) {
	if err := Check(file, data); err != nil {
		return toml.MetaData{}, err
	}
	md, err := toml.Decode(data, v)
	if err != nil {
		return md, SyntaxError(file, data, err)
	}
	return md, nil
}

// Check returns an *Error if data, read from file, is larger than MaxSize
// or has a key path deeper than MaxDepth (the first such, with its line).
func Check(file, data string) error {
	if len(data) > MaxSize {
		return &Error{File: file, Msg: fmt.Sprintf("%d bytes is too large for this file (at most %d)", len(data), MaxSize)}
	}
	if e := scan(data).deep; e != nil {
		e.File = file
		return e
	}
	return nil
}
