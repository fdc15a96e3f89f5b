package tomlpos

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// nest returns a document whose deepest key path has depth levels, in the
// given shape.
func nest(shape string, depth int) string {
	switch shape {
	case "dotted key":
		return "x = 1\n" + strings.Repeat("a.", depth-1) + "a = 1\n"
	case "header":
		return "[" + strings.Repeat("a.", depth-1) + "a]\n"
	case "array of tables":
		var b strings.Builder
		for i := range (depth + 1) / 2 { // [[a]] then [[a.a]]...: each adds a key and an index
			b.WriteString("[[" + strings.Repeat("a.", i) + "a]]\n")
		}
		return b.String()
	case "inline tables":
		return "a = " + strings.Repeat("{a = ", depth-1) + "1" + strings.Repeat("}", depth-1) + "\n"
	case "arrays":
		return "a = " + strings.Repeat("[", depth-1) + "1" + strings.Repeat("]", depth-1) + "\n"
	}
	panic(shape)
}

var shapes = []string{"dotted key", "header", "array of tables", "inline tables", "arrays"}

// TestDecodeDepth checks the depth limit in each shape that nests: at
// MaxDepth the document decodes; one deeper, Decode names the line.
func TestDecodeDepth(t *testing.T) {
	for _, shape := range shapes {
		t.Run(shape, func(t *testing.T) {
			deepest := MaxDepth
			if shape == "array of tables" {
				deepest-- // its paths grow two levels at a time
			}
			var m map[string]any
			if _, err := Decode("f.toml", nest(shape, deepest), &m); err != nil {
				t.Errorf("depth %d: %v", deepest, err)
			}
			doc := nest(shape, MaxDepth+1)
			_, err := Decode("f.toml", doc, &m)
			var e *Error
			if !errors.As(err, &e) || e.File != "f.toml" || e.Key == "" || !strings.Contains(e.Msg, "nested more than 32 deep") {
				t.Fatalf("depth %d: error %v, want one naming the file, key and limit", MaxDepth+1, err)
			}
			if want := strings.Count(doc, "\n"); e.Line != want {
				t.Errorf("line %d, want %d", e.Line, want)
			}
		})
	}
}

// TestCheckBoundsWork feeds Check the documents that cost the parser, or
// an unbounded scanner, time and memory growing with the square (or cube)
// of their depth: each must cost about its own size.
func TestCheckBoundsWork(t *testing.T) {
	for _, shape := range append(shapes, "unclosed") {
		t.Run(shape, func(t *testing.T) {
			doc := "a = " + strings.Repeat("{b = ", 1_000)
			if shape != "unclosed" {
				doc = nest(shape, 1_000)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := check("f.toml", doc)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Error("accepted")
			}
			if used := after.TotalAlloc - before.TotalAlloc; used > 64*uint64(len(doc)) {
				t.Errorf("allocated %d bytes for a %d-byte document", used, len(doc))
			}
		})
	}
}

func TestCheckSize(t *testing.T) {
	if _, err := check("f.toml", strings.Repeat("#", MaxSize)); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	_, err := check("f.toml", strings.Repeat("#", MaxSize+1))
	var e *Error
	if !errors.As(err, &e) || e.File != "f.toml" || !strings.Contains(e.Msg, "too large") {
		t.Errorf("over the limit: %v", err)
	}
}

func TestShorten(t *testing.T) {
	tests := []struct{ name, key, want string }{
		{"short", "a.b", "a.b"},
		{"at the limit", strings.Repeat("a", 60), strings.Repeat("a", 60)},
		{"over it", strings.Repeat("a", 61), strings.Repeat("a", 60) + "…"},
		{"not inside a rune", strings.Repeat("a", 59) + "éé", strings.Repeat("a", 59) + "…"}, // é: 2 bytes
		{"not UTF-8", strings.Repeat("\x80", 70), strings.Repeat("\x80", 60) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := shorten(tt.key); got != tt.want {
				t.Errorf("shorten(%q) = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
}
