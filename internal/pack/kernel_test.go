package pack

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const rel = "5.14.0-427.13.1.el9_4.x86_64"

// makeTree writes entries: "path" is a file with content, "path->target" a
// symlink, "path=" an empty file.
func makeTree(t *testing.T, entries ...string) string {
	t.Helper()
	tree := t.TempDir()
	for _, e := range entries {
		name, target, link := strings.Cut(e, "->")
		name, empty := strings.CutSuffix(name, "=")
		p := filepath.Join(tree, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case link:
			err = os.Symlink(target, p)
		case empty:
			err = os.WriteFile(p, nil, 0o644)
		default:
			err = os.WriteFile(p, []byte("image of "+name), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return tree
}

func TestKernel(t *testing.T) {
	hostBoot := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostBoot, "vmlinuz-6.1.0-host"), []byte("host kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		entries  []string
		wantPath string // inside the tree
		wantRel  string
		wantErr  string
	}{
		{
			name: "rocky 9: usr-merged modules, /boot copy, rescue kernel",
			entries: []string{"lib->usr/lib", "usr/lib/modules/" + rel + "/vmlinuz", "usr/lib/modules/" + rel + "/modules.dep",
				"boot/vmlinuz-" + rel, "boot/vmlinuz-0-rescue-0123456789abcdef", "boot/.vmlinuz-" + rel + ".hmac"},
			wantPath: "usr/lib/modules/" + rel + "/vmlinuz", wantRel: rel,
		},
		{
			name:     "modules dir of another kernel without vmlinuz is ignored",
			entries:  []string{"usr/lib/modules/" + rel + "/vmlinuz", "usr/lib/modules/5.14.0-1.el9.x86_64/extra/nvidia.ko"},
			wantPath: "usr/lib/modules/" + rel + "/vmlinuz", wantRel: rel,
		},
		{
			name:     "only /boot (Debian layout)",
			entries:  []string{"boot/vmlinuz-6.1.0-28-amd64", "boot/vmlinuz->vmlinuz-6.1.0-28-amd64", "boot/vmlinuz.old->vmlinuz-6.1.0-28-amd64"},
			wantPath: "boot/vmlinuz-6.1.0-28-amd64", wantRel: "6.1.0-28-amd64",
		},
		{
			name:    "no kernel",
			entries: []string{"etc/passwd", "boot/vmlinuz-0-rescue-0123", "usr/lib/modules/" + rel + "/vmlinuz="},
			wantErr: "the image has no kernel",
		},
		{
			name:    "two kernels",
			entries: []string{"usr/lib/modules/" + rel + "/vmlinuz", "boot/vmlinuz-5.14.0-362.el9.x86_64"},
			wantErr: "the image has 2 kernels, want exactly one: 5.14.0-362.el9.x86_64 (/boot/vmlinuz-5.14.0-362.el9.x86_64), " + rel + " (/usr/lib/modules/" + rel + "/vmlinuz)",
		},
		{
			name:    "a link out of the tree is never the host's kernel",
			entries: []string{"boot->" + hostBoot},
			wantErr: "escapes",
		},
		{
			name:    "a symlinked vmlinuz is not a kernel",
			entries: []string{"boot/vmlinuz-" + rel + "->" + filepath.Join(hostBoot, "vmlinuz-6.1.0-host")},
			wantErr: "the image has no kernel",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := makeTree(t, tc.entries...)
			p, r, err := Kernel(tree)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p != filepath.Join(tree, tc.wantPath) || r != tc.wantRel {
				t.Errorf("got %s %s, want %s %s", p, r, tc.wantPath, tc.wantRel)
			}
		})
	}
}

func TestKernelNotFoundIsSentinel(t *testing.T) {
	if _, _, err := Kernel(t.TempDir()); !errors.Is(err, ErrNoKernel) {
		t.Errorf("err = %v, want ErrNoKernel", err)
	}
}

func TestInitramfs(t *testing.T) {
	img := "boot/initramfs-" + rel + ".img"
	for _, tc := range []struct {
		name    string
		entries []string
		release string
		wantErr string
	}{
		{"made by dracut", []string{img, "boot/initramfs-0-rescue-0123.img"}, rel, ""},
		{"through a relative /boot link", []string{"boot->usr/boot", "usr/" + img}, rel, ""},
		{"missing", []string{"boot/initramfs-5.14.0-1.el9.x86_64.img"}, rel,
			"the image has no initramfs for " + rel + " (no non-empty regular file /" + img},
		{"empty", []string{img + "="}, rel, "does a layer run dracut?"},
		{"a release that is a path", []string{img}, "../../etc/passwd", "bad kernel release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := makeTree(t, tc.entries...)
			p, err := Initramfs(tree, tc.release)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(tc.wantErr, "no initramfs") && !errors.Is(err, ErrNoInitramfs) {
					t.Errorf("err = %v, want ErrNoInitramfs", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p != filepath.Join(tree, img) {
				t.Errorf("got %s, want %s", p, filepath.Join(tree, img))
			}
		})
	}
}

func TestCopyFile(t *testing.T) {
	tree := makeTree(t, "boot/vmlinuz-x", "boot/link->vmlinuz-x")
	dst := filepath.Join(t.TempDir(), "vmlinuz")
	for _, tc := range []struct {
		name, src, wantErr string
	}{
		{"regular file", "boot/vmlinuz-x", ""},
		{"symlink refused", "boot/link", "too many levels"},
		{"directory refused", "boot", "not a regular file"},
		{"missing", "boot/none", "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CopyFile(filepath.Join(tree, tc.src), dst)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			got, err := os.ReadFile(dst)
			if err != nil || string(got) != "image of boot/vmlinuz-x" {
				t.Errorf("copied %q, %v", got, err)
			}
		})
	}
}
