package tftpd

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Allowed is the complete list of files the server will send: the iPXE
// loaders for BIOS (undionly.kpxe) and x86-64 UEFI (ipxe.efi, snponly.efi).
var Allowed = []string{"undionly.kpxe", "ipxe.efi", "snponly.efi"}

// ErrNotAllowed is returned (wrapped) by CleanPath for any path that is not
// one of the Allowed files.
var ErrNotAllowed = errors.New("file not allowed")

// CleanPath maps the path a client asked for to one of the Allowed names.
// It accepts the name with or without one leading '/' (PXE ROMs send both),
// and nothing else: no directories, no "..", no backslashes (some servers
// treat them as separators), no NUL, no other files. An exact match against
// a fixed list is simpler to trust than cleaning an arbitrary path.
func CleanPath(p string) (string, error) {
	if strings.ContainsAny(p, "\x00\\") {
		return "", fmt.Errorf("path %q: backslash or NUL: %w", p, ErrNotAllowed)
	}
	name := strings.TrimPrefix(p, "/")
	if !slices.Contains(Allowed, name) {
		return "", fmt.Errorf("path %q: %w", p, ErrNotAllowed)
	}
	return name, nil
}
