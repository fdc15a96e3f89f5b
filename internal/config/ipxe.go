package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ipxeBinaries are the files bootd serves over TFTP: BIOS, then UEFI.
var ipxeBinaries = []string{"undionly.kpxe", "ipxe.efi"}

// ipxeSearch is where distributions install iPXE (Debian, then Fedora/RHEL).
// A variable so that tests can point it elsewhere.
var ipxeSearch = []string{"/usr/lib/ipxe", "/usr/share/ipxe"}

// FindIPXEDir returns the directory to serve iPXE binaries from: cfgDir
// (Config.IPXEDir) if set, else the first of the usual places. The directory
// must hold undionly.kpxe or ipxe.efi. It runs at serve time, not at load
// time, because the binaries may be installed after the config is written.
func FindIPXEDir(cfgDir string) (string, error) {
	dirs := ipxeSearch
	if cfgDir != "" {
		dirs = []string{cfgDir}
	}
	for _, d := range dirs {
		if holdsIPXE(d) {
			return d, nil
		}
	}
	hint := "install iPXE (Debian: ipxe, Rocky: ipxe-bootimgs-x86) or set ipxe_dir"
	if cfgDir != "" {
		hint = "check ipxe_dir"
	}
	return "", fmt.Errorf("no iPXE binary (%s) in %s: %s",
		strings.Join(ipxeBinaries, " or "), strings.Join(dirs, ", "), hint)
}

func holdsIPXE(dir string) bool {
	for _, b := range ipxeBinaries {
		if fi, err := os.Stat(filepath.Join(dir, b)); err == nil && fi.Mode().IsRegular() {
			return true
		}
	}
	return false
}
