package rootfs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/labcluster/gpucluster/internal/child"
)

// Label gives every file of tree its SELinux label (the security.selinux attribute), as the tree's
// own policy says: the tree's setfiles (policycoreutils), chrooted, with the file_contexts of the
// policy /etc/selinux/config names, so the labels and the libselinux that reads them are the
// image's. A chroot-built tree is unlabelled otherwise, and a node that loads the policy would
// find every file unlabeled_t. setfiles is deterministic, and normalize keeps the attributes
// (sorted), so builds stay byte-identical. A tree without /etc/selinux/config, or with
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
	// setfiles sets labels through /proc/self/fd: /proc is mounted (and, like /dev, left out).
	unmount, err := mountAPI(tree)
	if err != nil {
		return fmt.Errorf("selinux: %w", err)
	}
	out, err := child.Command(ctx, "chroot", tree, "/usr/sbin/setfiles", "-F", "-e", "/proc", "-e", "/dev", contexts, "/").CombinedOutput()
	unmount()
	if err != nil {
		return fmt.Errorf("selinux: setfiles %s in %s: %w\n%s", contexts, tree, err, tail(out, 20))
	}
	return nil
}

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
