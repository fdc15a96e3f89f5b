package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/testkit/testhook"
)

func TestFindIPXEDir(t *testing.T) {
	empty, bios, uefi := t.TempDir(), t.TempDir(), t.TempDir()
	touch(t, filepath.Join(bios, "undionly.kpxe"))
	touch(t, filepath.Join(uefi, "ipxe.efi"))
	if err := os.Mkdir(filepath.Join(empty, "ipxe.efi"), 0o755); err != nil { // a directory does not count
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		search []string
		cfgDir string
		want   string
		err    string
	}{
		{"first holding bios", []string{empty, bios, uefi}, "", bios, ""},
		{"uefi only", []string{empty, uefi}, "", uefi, ""},
		{"configured", []string{bios}, uefi, uefi, ""},
		{"configured empty", []string{bios}, empty, "", "no iPXE binary (undionly.kpxe or ipxe.efi) in " + empty + ": check ipxe_dir"},
		{"none", []string{empty, "/nonexistent"}, "", "",
			"no iPXE binary (undionly.kpxe or ipxe.efi) in " + empty + ", /nonexistent: install iPXE (Debian: ipxe, Rocky: ipxe-bootimgs-x86) or set ipxe_dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testhook.Set(t, &ipxeSearch, tt.search)
			got, err := FindIPXEDir(tt.cfgDir)
			checkErr(t, err, tt.err)
			if got != tt.want {
				t.Errorf("FindIPXEDir(%q) = %q, want %q", tt.cfgDir, got, tt.want)
			}
		})
	}
}

func TestIPXESearchDefault(t *testing.T) {
	if got := strings.Join(ipxeSearch, " "); got != "/usr/lib/ipxe /usr/share/ipxe" {
		t.Errorf("search path %q", got)
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
