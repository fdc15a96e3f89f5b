package tomlpos

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestLines(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want map[string]int
	}{
		{"tables", "a = 1\n\n[t]\nb = 2\n[u.v]\nc = 3\n",
			map[string]int{"a": 1, "t": 3, "t.b": 4, "u": 5, "u.v": 5, "u.v.c": 6}},
		{"comments and blanks", "# x = 1\n  a = 1 # b = 2\n\t\n[t] # [u]\nb=2\r\n",
			map[string]int{"a": 2, "t": 4, "t.b": 5}},
		{"dotted and quoted", "a.b = 1\n\"c d\".'e' = 2\n a . f = 3\n",
			map[string]int{"a": 1, "a.b": 1, `"c d"`: 2, `"c d".e`: 2, "a.f": 3}},
		{"strings hide keys", "a = \"b = 1\"\nc = 'd = [2]'\ne = \"\\\"f = 3\"\ng = 1\n",
			map[string]int{"a": 1, "c": 2, "e": 3, "g": 4}},
		{"multiline strings", "a = \"\"\"\nb = 1\n\\\"\"\"\nc = 2\n\"\"\"\"\nd = '''\ne = 3\n'''\nf = 4\n",
			map[string]int{"a": 1, "d": 6, "f": 9}},
		{"arrays", "a = [\n  1, # b = 2\n  [2, 3],\n  {c = 4},\n]\nd = 5\n",
			map[string]int{"a": 1, "d": 6}},
		{"inline tables", "a = {b = 1,\n  c = {d = \"}\"}}\ne = 5\n",
			map[string]int{"a": 1, "a.b": 1, "a.c": 2, "a.c.d": 2, "e": 3}},
		{"array of tables", "[[a]]\nb = 1\n[[a]]\nb = 2\n",
			map[string]int{"a": 1, "a.b": 2}},
		{"dates", "a = 1979-05-27 07:32:00Z\nb = 2\n",
			map[string]int{"a": 1, "b": 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Lines(tt.doc); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Lines:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestPaths(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want map[string]int
	}{
		{"no arrays", "a = 1\n[t]\nb.c = 2\n",
			map[string]int{"a": 1, "t": 2, "t.b": 3, "t.b.c": 3}},
		{"array of tables", "[[a]]\nb = 1\n[[a]]\n\nb = 2\n",
			map[string]int{"a": 1, "a[0]": 1, "a[0].b": 2, "a[1]": 3, "a[1].b": 5}},
		{"nested arrays of tables", "[[a]]\n[[a.b]]\nc = 1\n[[a]]\n[[a.b]]\n[[a.b]]\nc = 2\n",
			map[string]int{"a": 1, "a[0]": 1, "a[0].b": 2, "a[0].b[0]": 2, "a[0].b[0].c": 3,
				"a[1]": 4, "a[1].b": 5, "a[1].b[0]": 5, "a[1].b[1]": 6, "a[1].b[1].c": 7}},
		{"subtable of the last table", "[[a]]\n[[a]]\n[a.t]\nk = 1\n",
			map[string]int{"a": 1, "a[0]": 1, "a[1]": 2, "a[1].t": 3, "a[1].t.k": 4}},
		{"tables under a table", "[r.m]\np = [1]\n[[r.m.f]]\nq = 2\n",
			map[string]int{"r": 1, "r.m": 1, "r.m.p": 2, "r.m.p[0]": 2, "r.m.f": 3, "r.m.f[0]": 3, "r.m.f[0].q": 4}},
		{"array items", "a = [\n  1,\n  {b = 2,\n   c = [3]},\n]\n",
			map[string]int{"a": 1, "a[0]": 2, "a[1]": 3, "a[1].b": 3, "a[1].c": 4, "a[1].c[0]": 4}},
		{"quoted parts", "[[\"x y\"]]\n'z.w' = 1\n",
			map[string]int{`"x y"`: 1, `"x y"[0]`: 1, `"x y"[0]."z.w"`: 2}},
		{"inline table", "s = { e = [\"a\", \"b\"] }\n",
			map[string]int{"s": 1, "s.e": 1, "s.e[0]": 1, "s.e[1]": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Paths(tt.doc); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Paths:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

// TestScanGarbage checks that the scanner ends on input that is not TOML,
// as syntax errors hand it.
func TestScanGarbage(t *testing.T) {
	for _, doc := range []string{"[", "[[", "a = [", "a = {", "a = \"", "a = '''", "= = =", "\x00", "a = {b", "]]]}}}", "\"", "a.\n", "[[a.", "a = [{"} {
		Lines(doc)
		Paths(doc)
	}
}

// FuzzPaths feeds the scanner any text, as Decode does before the parser:
// every line it finds is in the document, and a document check
// refuses for its depth (not its size) names a line of it.
func FuzzPaths(f *testing.F) {
	for _, doc := range []string{"[[a]]\nb = [1, {c = 2}]\n", "a = \"\"\"x\"\"\"\n[t.'u']\n", nest("inline tables", 40)} {
		f.Add(doc)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		lines := strings.Count(doc, "\n") + 1
		for p, l := range Paths(doc) {
			if l < 1 || l > lines {
				t.Errorf("path %q at line %d", p, l)
			}
		}
		_, err := check("f.toml", doc)
		var e *Error
		switch {
		case err == nil || len(doc) > MaxSize:
		case !errors.As(err, &e) || e.Line < 1 || e.Line > lines:
			t.Errorf("error %v not located in the document", err)
		}
	})
}
