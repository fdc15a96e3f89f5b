package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// recorder is a testing.TB that keeps what Check reports instead of failing the test.
type recorder struct {
	testing.TB
	errors, fatals []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, a...))
}
func (r *recorder) Fatalf(format string, a ...any) {
	r.fatals = append(r.fatals, fmt.Sprintf(format, a...))
}
func (r *recorder) Fatal(a ...any) { r.fatals = append(r.fatals, fmt.Sprint(a...)) }

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.golden")
	if err := os.WriteFile(path, []byte("same\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name                string
		path, got           string
		update              bool
		wantErrors, wantFat int
		wantFile            string // the file's content afterwards
	}{
		{"equal", path, "same\n", false, 0, 0, "same\n"},
		{"different", path, "other\n", false, 1, 0, "same\n"},
		{"missing file", filepath.Join(dir, "none.golden"), "x", false, 0, 1, ""},
		{"update rewrites, then compares equal", filepath.Join(dir, "sub", "new.golden"), "new\n", true, 0, 0, "new\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			*update = tt.update
			defer func() { *update = false }()
			r := &recorder{TB: t}
			Check(r, tt.path, []byte(tt.got))
			if len(r.errors) != tt.wantErrors || len(r.fatals) != tt.wantFat {
				t.Errorf("errors %q, fatals %q; want %d and %d", r.errors, r.fatals, tt.wantErrors, tt.wantFat)
			}
			if tt.wantFile != "" {
				if b, _ := os.ReadFile(tt.path); string(b) != tt.wantFile {
					t.Errorf("file holds %q, want %q", b, tt.wantFile)
				}
			}
		})
	}
}
