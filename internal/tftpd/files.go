package tftpd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// open opens one Allowed file under root as a regular file and returns its
// size for the tsize option.
//
// Symlinks inside root are followed. A symlink leaving root is followed only
// when its target has the same name as the link: Debian ships
// /usr/lib/ipxe/ipxe.efi -> /boot/ipxe.efi, and refusing that would break
// UEFI boot there, while a link to anything else (a key, /etc/shadow) is the
// mistake or attack the rule exists for.
func open(root, name string) (*os.File, int64, error) {
	var err error
	for _, file := range onDisk[name] {
		var f *os.File
		var size int64
		if f, size, err = openFile(root, file); !errors.Is(err, fs.ErrNotExist) {
			return f, size, err
		}
	}
	return nil, 0, err
}

// onDisk maps the names clients ask for to the file names distributions install: Debian's ipxe
// package uses the plain names, Rocky's ipxe-bootimgs-x86 the architecture-suffixed ones.
var onDisk = map[string][]string{
	"undionly.kpxe": {"undionly.kpxe"},
	"ipxe.efi":      {"ipxe.efi", "ipxe-x86_64.efi"},
	"snponly.efi":   {"snponly.efi", "ipxe-snponly-x86_64.efi"},
}

func openFile(root, name string) (*os.File, int64, error) {
	target, err := filepath.EvalSymlinks(filepath.Join(root, name))
	if err != nil {
		return nil, 0, err
	}
	if err := checkTarget(root, name, target); err != nil {
		return nil, 0, err
	}
	// target is fully resolved, so O_NOFOLLOW only trips if it was swapped
	// for a symlink since: refuse rather than follow it unchecked.
	f, err := os.OpenFile(target, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s: not a regular file", target)
	}
	return f, fi.Size(), nil
}

func checkTarget(root, name, target string) error {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	if within(realRoot, target) || filepath.Base(target) == name {
		return nil
	}
	return fmt.Errorf("%s is a link to %s, outside %s", filepath.Join(root, name), target, root)
}

func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}
