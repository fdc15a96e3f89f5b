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

// TestParseRelabel: setfiles' report of a label is read back whatever the path holds; anything
// else is refused rather than guessed at.
func TestParseRelabel(t *testing.T) {
	for _, tc := range []struct {
		line, path, context string
	}{
		{"Would relabel /etc/passwd from (null) to system_u:object_r:etc_t:s0", "/etc/passwd", "system_u:object_r:etc_t:s0"},
		{"Would relabel / from <no context> to system_u:object_r:root_t:s0", "/", "system_u:object_r:root_t:s0"},
		{"Would relabel /a dir from x to y/f from (null) to system_u:object_r:default_t:s0", "/a dir from x to y/f", "system_u:object_r:default_t:s0"},
		{"Would relabel /etc/x from a to b to c", "", ""},
		{"Relabeled /etc/passwd from (null) to system_u:object_r:etc_t:s0", "", ""},
		{"Would relabel etc/passwd from (null) to x", "", ""},
		{"Would relabel /etc/../../host from (null) to x", "", ""},
		{"setfiles: something else", "", ""},
	} {
		l, err := parseRelabel(tc.line)
		if tc.path == "" {
			if err == nil {
				t.Errorf("%q read as %+v, want an error", tc.line, l)
			}
			continue
		}
		if err != nil || l.path != tc.path || l.context != tc.context {
			t.Errorf("%q read as %+v (%v), want %s %s", tc.line, l, err, tc.path, tc.context)
		}
	}
}

// TestApplyLabelsStaysInTree: a path setfiles printed (a file name may hold a newline and so a
// line of its own) never labels a file outside the tree, through a symlink or otherwise.
func TestApplyLabelsStaysInTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("security.* attributes need root") // the e2e suite builds labelled images for real
	}
	host := t.TempDir()
	hostFile := filepath.Join(host, "file")
	if err := os.WriteFile(hostFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	if err := os.Symlink(host, filepath.Join(tree, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostFile, filepath.Join(tree, "file-link")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/out/file", "/file-link"} {
		err := applyLabels(tree, []label{{path: p, context: "system_u:object_r:etc_t:s0"}})
		if p == "/out/file" && err == nil {
			t.Errorf("labelling %s through a symlinked directory succeeded", p)
		}
		if n, _ := unix.Lgetxattr(hostFile, "security.selinux", make([]byte, 64)); n > 0 {
			t.Fatalf("labelling %s labelled the host's %s", p, hostFile)
		}
	}
}
