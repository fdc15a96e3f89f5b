package secrets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBMCPasswords(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.BMCPassword("c1"); !errors.Is(err, ErrNoBMCPassword) || !strings.Contains(err.Error(), "bootd power password c1") {
		t.Fatalf("no password yet: %v, want ErrNoBMCPassword with the command to give one", err)
	}
	must(t, s.SetBMCPassword("", "every-bmc"))
	must(t, s.SetBMCPassword("c2", "c2-only"))
	for _, tt := range []struct{ node, want string }{{"c1", "every-bmc"}, {"c2", "c2-only"}, {"master", "every-bmc"}} {
		t.Run(tt.node, func(t *testing.T) {
			// A fresh store reads the files bootd wrote, as after a restart.
			fresh, err := Open(dir)
			must(t, err)
			for _, st := range []*Store{s, fresh} {
				if pw, err := st.BMCPassword(tt.node); err != nil || string(pw) != tt.want {
					t.Fatalf("BMCPassword(%s) = %v, %v; want %q", tt.node, string(pw), err, tt.want)
				}
			}
		})
	}
	t.Run("files are private", func(t *testing.T) {
		for _, name := range []string{"c2", defaultBMC} {
			fi, err := os.Stat(filepath.Join(dir, "secrets", bmcDir, name))
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("%s: %v, mode %v; want 0600", name, err, fi.Mode().Perm())
			}
		}
	})
	t.Run("a readable file is refused", func(t *testing.T) {
		path := filepath.Join(dir, "secrets", bmcDir, "c3")
		must(t, os.WriteFile(path, []byte("leaked\n"), 0o644))
		if _, err := s.BMCPassword("c3"); !errors.Is(err, ErrUnsafe) {
			t.Fatalf("BMCPassword(c3) from a 0644 file: %v, want ErrUnsafe", err)
		}
		// A store holding it is refused whole when bootd starts.
		if _, err := Open(dir); !errors.Is(err, ErrUnsafe) {
			t.Fatalf("Open with a 0644 file in the store: %v, want ErrUnsafe", err)
		}
		must(t, os.Remove(path))
	})
	t.Run("printed redacted", func(t *testing.T) {
		pw, _ := s.BMCPassword("c2")
		for _, out := range []string{fmt.Sprint(pw), fmt.Sprintf("%v %s %#v %+v", pw, pw, pw, struct{ P BMCPassword }{pw})} {
			if strings.Contains(out, "c2-only") {
				t.Fatalf("printed %q", out)
			}
		}
	})
	for _, tt := range []struct {
		name, node string
		pw         BMCPassword
	}{{"empty", "c1", ""}, {"line break", "c1", "a\nb"}, {"too long", "c1", BMCPassword(strings.Repeat("x", MaxBMCPassword+1))}, {"bad node", "../x", "pw"}} {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			if err := s.SetBMCPassword(tt.node, tt.pw); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
