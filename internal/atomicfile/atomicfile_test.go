package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	for _, tt := range []struct {
		name string
		data string
		perm os.FileMode
	}{
		{"new file", "one", 0o600},
		{"replaces, new mode", "two", 0o644},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := Write(p, []byte(tt.data), tt.perm); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(p)
			st, _ := os.Stat(p)
			if err != nil || string(b) != tt.data || st.Mode().Perm() != tt.perm {
				t.Fatalf("%q %v %v, want %q %v", b, st.Mode().Perm(), err, tt.data, tt.perm)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Fatalf("temporary files left: %v", entries)
			}
		})
	}
	if err := Write(filepath.Join(dir, "missing", "x"), nil, 0o600); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

// TestTemps: Temps lists what a killed Write leaves, not the files it writes.
func TestTemps(t *testing.T) {
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "state.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, ".state.json.tmp-123456")
	if err := os.WriteFile(left, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Temps(dir)
	if err != nil || len(got) != 1 || got[0] != left {
		t.Fatalf("Temps = %v, %v; want [%s]", got, err, left)
	}
}
