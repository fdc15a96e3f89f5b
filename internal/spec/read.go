package spec

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/labcluster/gpucluster/internal/tomlpos"
)

// reader decodes one TOML document strictly. It keeps the first mistake,
// located by file, line and key path, and ignores everything after it, so
// that decoding code reads top to bottom without an error check per value.
type reader struct {
	file  string
	paths map[string]int // key path -> line (tomlpos.Paths)
	err   *tomlpos.Error
}

// table is one TOML table of the document and its key path ("" at the top).
type table struct {
	r    *reader
	path string
	m    map[string]any
}

// open parses the file at path and returns its top-level table.
func open(path string) (*reader, table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, table{}, fmt.Errorf("read %s: %w", path, err)
	}
	var m map[string]any
	doc, err := tomlpos.Decode(path, string(data), &m)
	if err != nil {
		return nil, table{}, err
	}
	r := &reader{file: path, paths: doc.Paths}
	return r, table{r: r, m: m}, nil
}

// done returns the reader's error, if any, as an error interface value.
func (r *reader) done() error {
	if r.err == nil {
		return nil
	}
	return r.err
}

// fail records a mistake at key path unless one was recorded before.
func (r *reader) fail(path, format string, args ...any) {
	if r.err == nil {
		r.err = &tomlpos.Error{File: r.file, Line: r.line(path), Key: path, Msg: fmt.Sprintf(format, args...)}
	}
}

// line finds the line of path, or of its closest parent the scanner saw
// (a missing key is blamed on its table), or else the first line.
func (r *reader) line(path string) int {
	for p := path; p != ""; p = parentPath(p) {
		if l, ok := r.paths[p]; ok {
			return l
		}
	}
	return 1
}

// parentPath cuts the last key or index off a path.
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		return p[:strings.LastIndexByte(p, '[')]
	}
	i := strings.LastIndexAny(p, ".]")
	if i < 0 {
		return ""
	}
	if p[i] == ']' {
		return p[:i+1]
	}
	return p[:i]
}

// key returns the path of key k in t.
func (t table) key(k string) string {
	if t.path == "" {
		return toml.Key{k}.String()
	}
	return t.path + "." + toml.Key{k}.String()
}

func item(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// only fails on the first key of t, in file order, that is not in known.
func (t table) only(known ...string) {
	var bad []string
	for _, k := range t.keys() {
		if !slices.Contains(known, k) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return
	}
	where := ""
	switch {
	case strings.HasSuffix(t.path, "]"):
		where = " in [[" + parentPath(t.path) + "]]"
	case t.path != "":
		where = " in [" + t.path + "]"
	}
	t.r.fail(t.key(bad[0]), "unknown key (known%s: %s)", where, strings.Join(sorted(known), ", "))
}

// keys returns the keys of t in file order, so that the first mistake
// reported is the first in the file.
func (t table) keys() []string {
	ks := make([]string, 0, len(t.m))
	for k := range t.m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b string) int {
		if la, lb := t.r.line(t.key(a)), t.r.line(t.key(b)); la != lb {
			return la - lb
		}
		return strings.Compare(a, b)
	})
	return ks
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// required fails unless every one of keys is set in t.
func (t table) required(keys ...string) {
	for _, k := range keys {
		if _, ok := t.m[k]; !ok {
			t.r.fail(t.key(k), "missing (required)")
		}
	}
}

func (t table) str(k string) string {
	v, ok := t.m[k]
	if !ok {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		t.r.fail(t.key(k), "want a string, got %s", tomlpos.TypeName(v))
	}
	return s
}

// optStr returns nil when k is not set, so that a site can override a
// value with "".
func (t table) optStr(k string) *string {
	if _, ok := t.m[k]; !ok {
		return nil
	}
	s := t.str(k)
	return &s
}

func (t table) boolean(k string, def bool) bool {
	if p := t.optBool(k); p != nil {
		return *p
	}
	return def
}

func (t table) optBool(k string) *bool {
	v, ok := t.m[k]
	if !ok {
		return nil
	}
	b, ok := v.(bool)
	if !ok {
		t.r.fail(t.key(k), "want a boolean, got %s", tomlpos.TypeName(v))
	}
	return &b
}

func (t table) integer(k string) int {
	v, ok := t.m[k]
	if !ok {
		return 0
	}
	n, ok := v.(int64)
	if !ok {
		t.r.fail(t.key(k), "want an integer, got %s", tomlpos.TypeName(v))
		return 0
	}
	if n < -1<<31 || n > 1<<31-1 {
		t.r.fail(t.key(k), "%d is out of range", n)
		return 0
	}
	return int(n)
}

// strs reads an array of strings; each item is checked by valid, which
// says what is wrong with it or returns "".
func (t table) strs(k string, valid func(string) string) []string {
	v, ok := t.m[k]
	if !ok {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		t.r.fail(t.key(k), "want an array of strings, got %s", tomlpos.TypeName(v))
		return nil
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		msg := ""
		if ok && valid != nil {
			msg = valid(s)
		}
		switch {
		case !ok:
			t.r.fail(item(t.key(k), i), "want a string, got %s", tomlpos.TypeName(e))
		case msg != "":
			t.r.fail(item(t.key(k), i), "%s", msg)
		case slices.Contains(out, s):
			t.r.fail(item(t.key(k), i), "%q is listed twice", s)
		}
		out = append(out, s)
	}
	return out
}

// sub returns the table at k, empty when k is not set.
func (t table) sub(k string) table {
	st := table{r: t.r, path: t.key(k)}
	v, ok := t.m[k]
	if !ok {
		return st
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.r.fail(st.path, "want a table, got %s", tomlpos.TypeName(v))
		return st
	}
	st.m = m
	return st
}

// list returns the tables of the array of tables at k, written either as
// [[k]] sections or as an array of inline tables.
func (t table) list(k string) []table {
	v, ok := t.m[k]
	if !ok {
		return nil
	}
	var items []any
	switch v := v.(type) {
	case []map[string]any:
		for _, m := range v {
			items = append(items, m)
		}
	case []any:
		items = v
	default:
		t.r.fail(t.key(k), "want an array of tables ([[%s]]), got %s", k, tomlpos.TypeName(v))
		return nil
	}
	out := make([]table, 0, len(items))
	for i, e := range items {
		m, ok := e.(map[string]any)
		if !ok {
			t.r.fail(item(t.key(k), i), "want a table, got %s", tomlpos.TypeName(e))
			return nil
		}
		out = append(out, table{r: t.r, path: item(t.key(k), i), m: m})
	}
	return out
}

// errorAt returns an error about key, on the line of linePath, in a file
// whose key paths are known: for checks made after decoding (Resolve).
func errorAt(file string, paths map[string]int, linePath, key, format string, args ...any) error {
	r := &reader{file: file, paths: paths}
	return &tomlpos.Error{File: file, Line: r.line(linePath), Key: key, Msg: fmt.Sprintf(format, args...)}
}
