package rootfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/labcluster/gpucluster/internal/child"
	"github.com/labcluster/gpucluster/internal/spec"
)

// writeFiles writes a layer's files with their mode and owner. Paths are absolute inside the
// image; a path that would leave the tree through a symlink is refused.
func writeFiles(tree string, files []spec.File) error {
	for _, f := range files {
		if err := writeFile(tree, f); err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	return nil
}

func writeFile(tree string, f spec.File) error {
	dst, err := inTree(tree, f.Path)
	if err != nil {
		return err
	}
	data, err := f.Data() // a source is read inside the layers directory only
	if err != nil {
		return err
	}
	uid, err := resolveOwner(tree, "passwd", f.Owner)
	if err != nil {
		return err
	}
	gid, err := resolveOwner(tree, "group", f.Group)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	_ = os.Remove(dst) // a package's file is replaced, not written through (it may be a symlink)
	if err := os.WriteFile(dst, data, f.Mode.Perm()); err != nil {
		return err
	}
	if err := os.Chown(dst, uid, gid); err != nil {
		return err
	}
	return os.Chmod(dst, f.Mode) // after chown, which clears setuid bits
}

// inTree maps an absolute image path to the host path under tree, refusing any path whose
// existing parent directories resolve (through symlinks) outside the tree.
func inTree(tree, p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("not an absolute path")
	}
	dst := filepath.Join(tree, filepath.Clean(p))
	parent := filepath.Dir(dst)
	for !exists(parent) {
		parent = filepath.Dir(parent)
	}
	real, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return "", err
	}
	realTree, err := filepath.EvalSymlinks(tree)
	if err != nil {
		return "", err
	}
	if real != realTree && !strings.HasPrefix(real, realTree+string(filepath.Separator)) {
		return "", fmt.Errorf("leaves the image through a symlink (%s)", real)
	}
	return dst, nil
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
