package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/labcluster/gpucluster/internal/child"
	"github.com/labcluster/gpucluster/internal/spec"
)

// writeFiles writes a layer's files with their mode and owner. Paths are absolute inside the
// image and are opened through an os.Root on the tree: a path that would leave the tree through
// a symlink is refused.
func writeFiles(tree string, files []spec.File) error {
	root, err := os.OpenRoot(tree)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, f := range files {
		if err := writeFile(root, f); err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	return nil
}

// writeFile streams f into the tree: a large source is never held whole. A package's file is
// replaced, not written through (it may be a symlink); chmod comes after chown, which clears
// setuid bits.
func writeFile(root *os.Root, f spec.File) error {
	if !filepath.IsAbs(f.Path) || filepath.Clean(f.Path) != f.Path || f.Path == "/" {
		return fmt.Errorf("not a clean absolute path of a file")
	}
	name := strings.TrimPrefix(f.Path, "/")
	uid, err := resolveOwner(root, "etc/passwd", f.Owner)
	if err != nil {
		return err
	}
	gid, err := resolveOwner(root, "etc/group", f.Group)
	if err != nil {
		return err
	}
	in, err := f.Open() // a source is read inside the layers directory only
	if err != nil {
		return err
	}
	defer in.Close()
	if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return inImage(err)
	}
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return inImage(err)
	}
	out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.Mode.Perm())
	if err != nil {
		return inImage(err)
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Chown(uid, gid)
	}
	if err == nil {
		err = out.Chmod(f.Mode)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = root.Remove(name) // not half a file, nor one with bytes the layer was not loaded with
	}
	return err
}

// inImage explains os.Root's refusal of a path that leads out of the tree.
func inImage(err error) error {
	if strings.Contains(err.Error(), "escapes") {
		return fmt.Errorf("%w: the path leaves the image through a symlink (paths are followed only while they stay inside the image)", err)
	}
	return err
}

// setServices enables and disables units with the host's systemctl acting on the tree
// (--root): the same symlinks systemd would make, without booting the image.
func setServices(ctx context.Context, tree string, s spec.Services) error {
	for verb, units := range map[string][]string{"enable": s.Enable, "disable": s.Disable} {
		if len(units) == 0 {
			continue
		}
		args := append([]string{"--root=" + tree, "--no-reload", verb}, units...)
		if out, err := child.Command(ctx, "systemctl", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("systemctl %s %s: %w: %s", verb, strings.Join(units, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
