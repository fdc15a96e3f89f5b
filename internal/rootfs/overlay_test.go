package rootfs

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/labcluster/gpucluster/internal/spec"
)

// overlaySteps are three layers that do to files below them what packages and commands do:
// remove a file (a whiteout), remove a directory and make it again (opaque), replace a directory
// with a file, rename a directory (a redirect), change the mode of one name of a hard-linked
// file, append to a file in every layer (as rpm does to its database), link a new name to a
// lower hard-linked file and append through another of its names, and carry xattrs.
func overlaySteps(t *testing.T) []Step {
	t.Helper()
	base := busyboxRPM(t)
	files := map[string]string{
		"usr/lib/a.so": "A\n", "etc/conf": "v1\n", "usr/share/old/x": "x\n", "usr/share/old/y": "y\n",
		"usr/share/gone": "gone\n", "opt/dir/file": "f\n", "var/lib/db": "1\n", "srv/tree/leaf": "leaf\n",
	}
	for p, c := range files {
		writeTestFile(t, filepath.Join(base, p), c)
	}
	if err := os.Link(filepath.Join(base, "usr/lib/a.so"), filepath.Join(base, "usr/lib/a-link.so")); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct{ name, value string }{{"user.zeta", "2"}, {"user.alpha", "1"}} {
		if err := unix.Lsetxattr(filepath.Join(base, "usr/lib/a.so"), x.name, []byte(x.value), 0); err != nil {
			t.Fatal(err)
		}
	}
	run := func(cmds ...string) []spec.Command {
		var out []spec.Command
		for _, c := range cmds {
			out = append(out, spec.Command{Command: c, Description: c})
		}
		return out
	}
	return []Step{
		{Layer: &spec.Layer{Name: "base", Digest: "d-base"}, RPMs: []string{base}},
		{Layer: &spec.Layer{Name: "mid", Digest: "d-mid", Run: run(
			"rm /usr/share/gone",
			"rm -r /usr/share/old && mkdir /usr/share/old && echo new > /usr/share/old/z",
			"rm -r /opt/dir && echo f > /opt/dir",
			"mv /srv/tree /srv/renamed",
			"chmod 600 /usr/lib/a-link.so",
			"echo 2 >> /var/lib/db",
		)}},
		{Layer: &spec.Layer{Name: "top", Digest: "d-top", Run: run(
			"echo 3 >> /var/lib/db",
			"cat /usr/lib/a.so > /dev/null",
			"ln /usr/lib/a.so /usr/lib/a-third.so",
			"echo appended >> /usr/lib/a-link.so",
		), Files: []spec.File{{Path: "/etc/conf", Content: "v2\n", Mode: 0o644}}}},
	}
}

// TestOverlayEqualsCopies: the layers stored as overlayfs diffs and seen through the merged view
// give, once normalized, the tree that applying the same layers one after another to one
// directory gives (what copying each parent's tree did): every path, type, mode, owner, time,
// content, symlink, xattr and hard link.
func TestOverlayEqualsCopies(t *testing.T) {
	requireRoot(t)
	steps := overlaySteps(t)
	b := newBuilder(t, &fakeInstall{})
	merged, _, err := mergedTree(t, b, steps)
	if err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(t.TempDir(), "tree")
	if err := os.Mkdir(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		if err := newBuilder(t, &fakeInstall{}).apply(context.Background(), st, plain); err != nil {
			t.Fatalf("layer %s on a plain tree: %v", st.Layer.Name, err)
		}
	}
	for _, tree := range []string{merged, plain} {
		if err := Normalize(tree, b.Epoch); err != nil {
			t.Fatal(err)
		}
	}
	got, want := listing(t, merged), listing(t, plain)
	if !slices.Equal(got, want) {
		t.Errorf("merged view differs from the copied tree:\n%s", diffLines(got, want))
	}
	for _, check := range []string{"usr/lib/a-third.so mode 100600", "link of usr/lib/a-link.so", "var/lib/db", "usr/share/old/z", "srv/renamed/leaf"} {
		if !slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, check) }) {
			t.Errorf("no entry with %q in the merged view:\n%s", check, strings.Join(got, "\n"))
		}
	}
}

// listing describes every entry under root, one line each, in path order.
func listing(t *testing.T, root string) []string {
	t.Helper()
	var lines []string
	first := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%s mode %o owner %d:%d mtime %d.%d xattrs %s", rel, st.Mode, st.Uid, st.Gid, st.Mtim.Sec, st.Mtim.Nsec, xattrLine(t, p))
		switch {
		case d.Type().IsRegular():
			if f, ok := first[st.Ino]; ok && st.Nlink > 1 {
				line += " link of " + f
			} else {
				first[st.Ino] = rel
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				line += fmt.Sprintf(" nlink %d sha256 %x", st.Nlink, sha256.Sum256(data))
			}
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

func xattrLine(t *testing.T, p string) string {
	t.Helper()
	names, err := listXattrs(p)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, n := range names {
		v, err := getXattr(p, n)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, n+"="+string(v))
	}
	return strings.Join(parts, ",")
}

func diffLines(got, want []string) string {
	var b strings.Builder
	for _, l := range got {
		if !slices.Contains(want, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	return b.String()
}
