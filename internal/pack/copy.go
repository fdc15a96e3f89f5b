package pack

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// CopyFile copies the regular file src to dst (created or truncated, mode
// 0644), for staging a kernel or initramfs next to the squashfs. A symlink or
// anything but a regular file as src is refused: it would be a way out of the
// tree.
func CopyFile(src, dst string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil {
		return fmt.Errorf("copy: %w", err)
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("copy %s: not a regular file (%s)", src, fi.Mode().Type())
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}
