package tftpd

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	logtest "github.com/sirupsen/logrus/hooks/test"
)

// TestServerOpen checks that HTTP's door to the loaders (Server.Open) keeps
// the TFTP rules: allowed names only, no link out of root to another file.
func TestServerOpen(t *testing.T) {
	root, outside := ipxeDir(t), t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "snponly.efi")))
	log, _ := logtest.NewNullLogger()
	s, err := New(root, log)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		ok   bool
	}{
		{"ipxe.efi", true},
		{"/undionly.kpxe", true},
		{"snponly.efi", false}, // link to another file outside root
		{"../secret", false},
		{"pxelinux.0", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := s.Open(tt.name)
			if !tt.ok {
				if err == nil {
					f.Close()
					t.Fatalf("Open(%q) succeeded, want refusal", tt.name)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q): %v", tt.name, err)
			}
			defer f.Close()
			data, _ := io.ReadAll(f)
			if want := content[filepath.Base(tt.name)]; string(data) != string(want) {
				t.Fatalf("Open(%q) read %d bytes, want %d", tt.name, len(data), len(want))
			}
		})
	}
}

func TestRockyFileNames(t *testing.T) {
	root := t.TempDir()
	for name, content := range map[string]string{"undionly.kpxe": "bios", "ipxe-x86_64.efi": "uefi", "ipxe-snponly-x86_64.efi": "snp"} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	log, _ := logtest.NewNullLogger()
	s, err := New(root, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ ask, want string }{{"ipxe.efi", "uefi"}, {"snponly.efi", "snp"}, {"undionly.kpxe", "bios"}} {
		t.Run(tt.ask, func(t *testing.T) {
			f, err := s.Open(tt.ask)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b, _ := io.ReadAll(f)
			if string(b) != tt.want {
				t.Fatalf("%s served %q, want %q", tt.ask, b, tt.want)
			}
		})
	}
}
