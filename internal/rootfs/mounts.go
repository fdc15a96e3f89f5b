package rootfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// mountAPI mounts /proc and a small /dev (null, zero, random, urandom, tty) into tree for
// package scriptlets and commands, and returns the function that unmounts them. /dev is a fresh
// tmpfs rather than a bind of the host's, so nothing the build does there reaches the host and
// no device node is left in the image.
func mountAPI(tree string) (func(), error) {
	var mounted []string
	unmount := func() {
		for i := len(mounted) - 1; i >= 0; i-- {
			_ = unix.Unmount(mounted[i], unix.MNT_DETACH)
		}
	}
	for _, m := range []struct{ dir, fstype string }{{"proc", "proc"}, {"dev", "tmpfs"}} {
		dir := filepath.Join(tree, m.dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			unmount()
			return nil, err
		}
		if err := unix.Mount(m.fstype, dir, m.fstype, unix.MS_NOSUID, ""); err != nil {
			unmount()
			return nil, fmt.Errorf("mount %s in the image: %w", m.dir, err)
		}
		mounted = append(mounted, dir)
	}
	if err := makeDevices(filepath.Join(tree, "dev")); err != nil {
		unmount()
		return nil, err
	}
	return unmount, nil
}

func makeDevices(dev string) error {
	for _, d := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}} {
		if err := unix.Mknod(filepath.Join(dev, d.name), unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("mknod /dev/%s: %w", d.name, err)
		}
	}
	return nil
}

func bytesLines(b []byte) []string {
	return strings.Split(string(bytes.TrimRight(b, "\n")), "\n")
}

func joinLines(lines []string) string { return strings.Join(lines, "\n") }
