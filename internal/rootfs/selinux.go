package rootfs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/labcluster/gpucluster/internal/sandbox"
)

// Label gives every file of tree its SELinux label (the security.selinux attribute), as the tree's
// own policy says: the tree's setfiles (policycoreutils), in the build sandbox, with the
// file_contexts of the policy /etc/selinux/config names, so the labels and the libselinux that
// reads them are the image's. A tree built outside SELinux is unlabelled otherwise, and a node
// that loads the policy would find every file unlabeled_t. setfiles is deterministic, and
// normalize keeps the attributes (sorted), so builds stay byte-identical. A tree without /etc/selinux/config, or with
// SELINUX=disabled, is left as it is; one that names a policy it lacks is an error.
func Label(ctx context.Context, tree string) error {
	mode, policy, err := selinuxConfig(filepath.Join(tree, "etc/selinux/config"))
	if errors.Is(err, fs.ErrNotExist) || err == nil && mode == "disabled" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("selinux: %w", err)
	}
	contexts := "/etc/selinux/" + policy + "/contexts/files/file_contexts"
	for _, need := range []string{contexts, "/usr/sbin/setfiles"} {
		if _, err := os.Stat(filepath.Join(tree, need)); err != nil {
			return fmt.Errorf("selinux: /etc/selinux/config names policy %q (SELINUX=%s), but the image has no %s: install the policy and policycoreutils, or set SELINUX=disabled", policy, mode, need)
		}
	}
	labels, err := setfilesDryRun(ctx, tree, contexts)
	if err != nil {
		return err
	}
	return applyLabels(tree, labels)
}

// A label is what setfiles would give one path of the image.
type label struct{ path, context string }

// setfilesDryRun runs the image's setfiles in the build sandbox (it is the image's code, run as
// root) and returns the labels it would set, in its order. It only reports (-n -v): setting a
// security.* attribute takes CAP_SYS_ADMIN where the builder runs no SELinux, and the sandbox
// keeps no such capability, so applyLabels sets them from outside. -F makes every file reported,
// as setfiles -F labels every file of an unlabelled tree.
func setfilesDryRun(ctx context.Context, tree, contexts string) ([]label, error) {
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}
	cmd, err := sandbox.Image(ctx, tree, sandbox.Options{Env: env}, "/usr/sbin/setfiles", "-n", "-v", "-F", "-e", "/proc", "-e", "/dev", contexts, "/")
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("selinux: setfiles %s in %s (in the build sandbox): %w\n%s", contexts, tree, err, tail(stderr.Bytes(), 20))
	}
	var labels []label
	for _, line := range strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n") {
		if line == "" {
			continue
		}
		l, err := parseRelabel(line)
		if err != nil {
			return nil, fmt.Errorf("selinux: setfiles in %s: %w", tree, err)
		}
		labels = append(labels, l)
	}
	return labels, nil
}

// parseRelabel reads setfiles' "Would relabel PATH from OLD to NEW". Contexts have no blanks, so
// NEW is after the last " to " and OLD after the last " from " before it: a path may hold either.
func parseRelabel(line string) (label, error) {
	rest, ok := strings.CutPrefix(line, "Would relabel ")
	i := strings.LastIndex(rest, " to ")
	if !ok || i < 0 {
		return label{}, fmt.Errorf("unexpected output %q", line)
	}
	rest, context := rest[:i], rest[i+len(" to "):]
	j := strings.LastIndex(rest, " from ")
	if j < 0 || context == "" || strings.ContainsAny(context, " \x00") {
		return label{}, fmt.Errorf("unexpected output %q", line)
	}
	p, old := rest[:j], rest[j+len(" from "):]
	if old != "<no context>" && strings.ContainsAny(old, " ") {
		return label{}, fmt.Errorf("unexpected output %q", line)
	}
	if !path.IsAbs(p) || path.Clean(p) != p {
		return label{}, fmt.Errorf("unexpected path in %q", line)
	}
	return label{path: p, context: context}, nil
}

// applyLabels sets each label's security.selinux attribute (the context and its NUL, as
// setfiles writes it) on its path in tree, in order (a later name of a hard-linked file wins, as
// with setfiles). Each path's directory is opened beneath tree with no symlink followed, and the
// file itself is not followed: a path setfiles printed (a file name may hold a newline) reaches
// nothing outside the tree.
func applyLabels(tree string, labels []label) error {
	top, err := unix.Open(tree, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: tree, Err: err}
	}
	defer unix.Close(top)
	for _, l := range labels {
		if err := setLabel(top, tree, l); err != nil {
			return fmt.Errorf("selinux: label %s: %w", l.path, err)
		}
	}
	return nil
}

func setLabel(top int, tree string, l label) error {
	value := append([]byte(l.context), 0)
	if l.path == "/" {
		return unix.Lsetxattr(tree, selinuxXattr, value, 0)
	}
	dir, base := path.Split(strings.TrimPrefix(l.path, "/"))
	if dir == "" {
		dir = "."
	}
	fd, err := unix.Openat2(top, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Lsetxattr(fmt.Sprintf("/proc/self/fd/%d/%s", fd, base), selinuxXattr, value, 0)
}

const selinuxXattr = "security.selinux"

// selinuxConfig reads SELINUX= and SELINUXTYPE= from an /etc/selinux/config.
func selinuxConfig(path string) (mode, policy string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		switch {
		case !ok || strings.HasPrefix(k, "#"):
		case k == "SELINUX":
			mode = strings.TrimSpace(v)
		case k == "SELINUXTYPE":
			policy = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", err
	}
	if mode == "" || policy == "" || strings.ContainsAny(policy, "/ ") {
		return mode, policy, fmt.Errorf("%s: want SELINUX= and SELINUXTYPE= (a policy name), got %q and %q", path, mode, policy)
	}
	return mode, policy, nil
}
