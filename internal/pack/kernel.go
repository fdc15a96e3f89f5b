package pack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

var (
	// ErrNoKernel is returned (wrapped) when the tree has no kernel.
	ErrNoKernel = errors.New("the image has no kernel")
	// ErrNoInitramfs is returned (wrapped) when the tree has no initramfs
	// for its kernel.
	ErrNoInitramfs = errors.New("the image has no initramfs")
)

// moduleDirs hold /lib/modules/<release>/vmlinuz, where Rocky 9's
// kernel-core installs the kernel; /lib is a relative symlink to usr/lib
// there, so both spellings may name one directory.
var moduleDirs = []string{"usr/lib/modules", "lib/modules"}

// Kernel finds the image's kernel: /lib/modules/<release>/vmlinuz (Rocky 9,
// preferred because the package owns it) or /boot/vmlinuz-<release> (the copy
// kernel-install makes, and where other distributions keep it). The image
// must have exactly one kernel release; dracut's rescue kernel
// (vmlinuz-0-rescue-*) does not count. Paths resolve inside the tree: a link
// out of it is an error, never the build host's kernel.
func Kernel(tree string) (kernelPath, release string, err error) {
	root, err := os.OpenRoot(tree)
	if err != nil {
		return "", "", fmt.Errorf("find kernel: %w", err)
	}
	defer root.Close()
	found := map[string]string{} // release -> path inside the tree; the first found wins
	if err := moduleKernels(root, found); err != nil {
		return "", "", fmt.Errorf("find kernel in %s: %w", tree, err)
	}
	if err := bootKernels(root, found); err != nil {
		return "", "", fmt.Errorf("find kernel in %s: %w", tree, err)
	}
	switch len(found) {
	case 0:
		return "", "", fmt.Errorf("%w (no /lib/modules/*/vmlinuz or /boot/vmlinuz-* in %s): does a layer install kernel-core?", ErrNoKernel, tree)
	case 1:
		for rel, p := range found {
			return filepath.Join(tree, p), rel, nil
		}
	}
	return "", "", fmt.Errorf("the image has %d kernels, want exactly one: %s", len(found), listKernels(found))
}

func listKernels(found map[string]string) string {
	var list []string
	for rel, p := range found {
		list = append(list, rel+" (/"+p+")")
	}
	slices.Sort(list)
	return strings.Join(list, ", ")
}

// moduleKernels adds /lib/modules/<release>/vmlinuz.
func moduleKernels(root *os.Root, found map[string]string) error {
	for _, dir := range moduleDirs {
		entries, err := fs.ReadDir(root.FS(), dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := path.Join(dir, e.Name(), "vmlinuz")
			ok, err := nonEmptyFile(root, p)
			if err != nil {
				return err
			}
			if _, dup := found[e.Name()]; ok && !dup {
				found[e.Name()] = p
			}
		}
	}
	return nil
}

// bootKernels adds /boot/vmlinuz-<release>.
func bootKernels(root *os.Root, found map[string]string) error {
	entries, err := fs.ReadDir(root.FS(), "boot")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		rel, ok := strings.CutPrefix(e.Name(), "vmlinuz-")
		if !ok || rel == "" || strings.HasPrefix(rel, "0-rescue-") {
			continue
		}
		p := path.Join("boot", e.Name())
		ok, err := nonEmptyFile(root, p)
		if err != nil {
			return err
		}
		if _, dup := found[rel]; ok && !dup {
			found[rel] = p
		}
	}
	return nil
}

// nonEmptyFile reports whether p is a regular file with content. Links in
// p's directories are followed inside the tree (a link out of it is an
// error); p itself must not be a link, so that CopyFile can refuse links.
func nonEmptyFile(root *os.Root, p string) (bool, error) {
	fi, err := root.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return fi.Mode().IsRegular() && fi.Size() > 0, nil
}

// Initramfs returns /boot/initramfs-<release>.img, which dracut made inside
// the image for the image's kernel (so it carries the image's modules and
// dracut modules, not the build host's).
func Initramfs(tree, release string) (string, error) {
	if release == "" || strings.ContainsAny(release, "/\x00") || release == "." || release == ".." {
		return "", fmt.Errorf("find initramfs: bad kernel release %q", release)
	}
	root, err := os.OpenRoot(tree)
	if err != nil {
		return "", fmt.Errorf("find initramfs: %w", err)
	}
	defer root.Close()
	p := path.Join("boot", "initramfs-"+release+".img")
	ok, err := nonEmptyFile(root, p)
	if err != nil {
		return "", fmt.Errorf("find initramfs in %s: %w", tree, err)
	}
	if !ok {
		return "", fmt.Errorf("%w for %s (no non-empty regular file /%s in %s): does a layer run dracut?", ErrNoInitramfs, release, p, tree)
	}
	return filepath.Join(tree, p), nil
}
