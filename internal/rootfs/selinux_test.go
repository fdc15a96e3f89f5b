package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/labcluster/gpucluster/internal/testkit/ldd"
)

// testContexts is a small file_contexts: what the targeted policy says for these paths, in its form.
const testContexts = "/.*\tsystem_u:object_r:default_t:s0\n/etc(/.*)?\tsystem_u:object_r:etc_t:s0\n/usr/bin(/.*)?\tsystem_u:object_r:bin_t:s0\n"

// Label runs the tree's own setfiles (here the host's, with its libraries, standing in for the
// image's policycoreutils) and every file gets the label its file_contexts gives; a tree without
// an SELinux config, or with SELinux disabled, is left unlabelled; one naming a policy it lacks is
// refused with what to do.
func TestLabel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot and security.* attributes need root") // the e2e suite builds labelled images for real
	}
	setfiles := "/usr/sbin/setfiles"
	if _, err := os.Stat(setfiles); err != nil {
		t.Fatalf("setfiles (Debian package policycoreutils; scripts/setup-debian.sh installs it): %v", err)
	}
	libs, err := ldd.Needs(setfiles)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, config string
		contexts     bool
		labelled     bool
		err          string
	}{
		{"targeted, permissive", "SELINUX=permissive\nSELINUXTYPE=targeted\n", true, true, ""},
		{"disabled", "SELINUX=disabled\nSELINUXTYPE=targeted\n", true, false, ""},
		{"no config", "", false, false, ""},
		{"policy missing", "SELINUX=enforcing\nSELINUXTYPE=targeted\n", false, false, "the image has no /etc/selinux/targeted/contexts/files/file_contexts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := t.TempDir()
			write := func(p string, data []byte, mode os.FileMode) {
				t.Helper()
				if err := os.MkdirAll(filepath.Dir(filepath.Join(tree, p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(tree, p), data, mode); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range append([]string{setfiles}, libs...) {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				write(f, b, 0o755)
			}
			write("etc/passwd", []byte("root:x:0:0::/root:/bin/sh\n"), 0o644)
			write("usr/bin/tool", []byte("#!/bin/sh\n"), 0o755)
			if tc.config != "" {
				write("etc/selinux/config", []byte(tc.config), 0o644)
			}
			if tc.contexts {
				write("etc/selinux/targeted/contexts/files/file_contexts", []byte(testContexts), 0o644)
			}
			err := Label(context.Background(), tree)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Label: %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for p, want := range map[string]string{"etc/passwd": "system_u:object_r:etc_t:s0", "usr/bin/tool": "system_u:object_r:bin_t:s0"} {
				buf := make([]byte, 256)
				n, err := unix.Lgetxattr(filepath.Join(tree, p), "security.selinux", buf)
				got := ""
				if err == nil {
					got = strings.TrimRight(string(buf[:n]), "\x00")
				}
				if tc.labelled && got != want || !tc.labelled && got != "" {
					t.Errorf("%s labelled %q (%v), want %q (labelled: %v)", p, got, err, want, tc.labelled)
				}
			}
		})
	}
}
