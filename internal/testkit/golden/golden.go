// Package golden compares test output with files under testdata and, under -update, rewrites them.
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// The one -update flag of every test binary that imports this package: a test package that
// declared its own as well would panic at start, so they ask Update instead.
var update = flag.Bool("update", false, "rewrite the golden files under testdata instead of comparing with them")

// Update reports whether the test binary runs with -update: tests with golden output of another
// shape (a directory of files, a fuzz seed corpus) rewrite it themselves then.
func Update() bool { return *update }

// Check fails t unless got equals the file at path. Under -update it writes got to path first
// (making its directory), so the diff shows in review instead of in a test failure.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (if the change is intended, run go test -update and review the diff):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
