package sha256hex

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The sha256 of "abc" (FIPS 180-2, appendix B.1).
const abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

func TestOf(t *testing.T) {
	sum, n, err := Of(strings.NewReader("abc"))
	if err != nil || sum != abc || n != 3 {
		t.Fatalf("Of(abc) = %s, %d, %v; want %s, 3", sum, n, err, abc)
	}
}

func TestFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("abc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if sum, err := File(p); err != nil || sum != abc {
		t.Fatalf("File = %s, %v; want %s", sum, err, abc)
	}
	_, err := File(filepath.Join(dir, "missing"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("File(missing) = %v, want an error wrapping fs.ErrNotExist", err)
	}
	if _, err := File(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("File(a directory) = %v, want an error naming it", err)
	}
}

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
		want bool
	}{
		{"digest", abc, true},
		{"upper case", strings.ToUpper(abc), false},
		{"too short", abc[:63], false},
		{"too long", abc + "0", false},
		{"not hex", "g" + abc[1:], false},
		{"multibyte rune", "é" + abc[2:], false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Valid(tc.s); got != tc.want {
				t.Errorf("Valid(%q) = %v, want %v", tc.s, got, tc.want)
			}
		})
	}
}

// Prune removes exactly the digest-named entries (with the suffix) that keep does not hold.
func TestPrune(t *testing.T) {
	a, b := strings.Repeat("a", 64), strings.Repeat("b", 64)
	for _, tc := range []struct {
		name, suffix string
		files        []string
		keep         map[string]bool
		left         []string
	}{
		{"packages", ".rpm", []string{a + ".rpm", b + ".rpm", b + ".rpm.part", "notes"}, map[string]bool{a: true},
			[]string{a + ".rpm", b + ".rpm.part", "notes"}},
		{"trees", "", []string{a, b, ".build-" + b}, map[string]bool{b: true}, []string{".build-" + b, b}},
		{"nothing kept", "", []string{a, b}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			n, err := Prune(dir, tc.suffix, tc.keep, func(path, _ string) error { return os.Remove(path) })
			if err != nil {
				t.Fatal(err)
			}
			entries, _ := os.ReadDir(dir)
			var left []string
			for _, e := range entries {
				left = append(left, e.Name())
			}
			if strings.Join(left, " ") != strings.Join(tc.left, " ") || n != len(tc.files)-len(tc.left) {
				t.Errorf("left %v (removed %d), want %v", left, n, tc.left)
			}
		})
	}
	if n, err := Prune(filepath.Join(t.TempDir(), "missing"), "", nil, nil); n != 0 || err != nil {
		t.Errorf("missing dir: %d, %v; want 0, nil", n, err)
	}
	stop := errors.New("stop")
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, a), nil, 0o644)
	if _, err := Prune(dir, "", nil, func(string, string) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("remove's error: got %v", err)
	}
}
