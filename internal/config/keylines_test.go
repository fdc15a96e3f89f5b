package config

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestKeyLines(t *testing.T) {
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
			if got := keyLines(tt.doc); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("keyLines:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

// TestKeyLinesGarbage checks that the scanner ends on input that is not
// TOML, as syntax errors hand it.
func TestKeyLinesGarbage(t *testing.T) {
	for _, doc := range []string{"[", "[[", "a = [", "a = {", "a = \"", "a = '''", "= = =", "\x00", "a = {b", "]]]}}}", "\"", "a.\n"} {
		keyLines(doc)
	}
}

// TestKeyLinesFull checks every key of the reference file against the text
// of the line found for it.
func TestKeyLinesFull(t *testing.T) {
	data, err := os.ReadFile("testdata/full.toml")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	md, err := toml.Decode(string(data), &m)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Split(string(data), "\n")
	lines := keyLines(string(data))
	for _, k := range md.Keys() {
		t.Run(k.String(), func(t *testing.T) {
			l := lines[k.String()]
			leaf := k[len(k)-1]
			if l < 1 || !strings.HasPrefix(strings.Trim(text[l-1], "[ "), leaf) {
				t.Errorf("line %d %q does not define %s", l, text[max(l-1, 0)], k)
			}
		})
	}
}
