package tomlpos

import (
	"errors"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestErrorString(t *testing.T) {
	tests := []struct {
		name string
		err  Error
		want string
	}{
		{"all", Error{File: "a.toml", Line: 12, Key: "files[0].mode", Msg: "bad"}, "a.toml:12: files[0].mode: bad"},
		{"no line", Error{File: "a.toml", Key: "k", Msg: "bad"}, "a.toml: k: bad"},
		{"no file", Error{Key: "k", Msg: "bad"}, "k: bad"},
		{"no key", Error{File: "a.toml", Line: 3, Msg: "bad"}, "a.toml:3: bad"},
		{"line only", Error{Line: 3, Msg: "bad"}, "line 3: bad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSyntaxError(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"bad value", "a = 1\n[t]\nb = nope\n", "x.toml:3: t.b: syntax error: "},
		{"unterminated string", "a = \"x\n", "x.toml:1: a: syntax error: "},
		{"duplicate key", "a = 1\na = 2\n", "x.toml:2: a: syntax error: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m map[string]any
			_, perr := toml.Decode(tt.doc, &m)
			if perr == nil {
				t.Fatal("document parsed")
			}
			err := syntaxError("x.toml", tt.doc, Lines(tt.doc), perr)
			if got := err.Error(); len(got) < len(tt.want) || got[:len(tt.want)] != tt.want {
				t.Errorf("got %q, want prefix %q", got, tt.want)
			}
			if !errors.Is(err, perr) {
				t.Error("the parser's error is not wrapped")
			}
		})
	}
}
