// Package layers holds the image layers (TOML) and the files they install; its tests exercise
// the layers' own scripts, the parts of an image that run on a node.
package layers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// chroot is a minimal root: busybox as sh and the applets the scripts use, plus files.
func chroot(t *testing.T, files map[string]string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests chroot: run them as root, as CI does")
	}
	root := t.TempDir()
	write := func(path, content string, mode os.FileMode) {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static: %v", err)
	}
	write("bin/busybox", string(bb), 0o755)
	for _, a := range []string{"sh", "cat", "cut", "sha256sum", "tr", "sed", "head", "printf", "echo", "mktemp", "rm", "sleep", "tar"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	for p, c := range files {
		write(p, c, 0o755)
	}
	return root
}

func run(t *testing.T, root string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("chroot", append([]string{root}, args...)...)
	cmd.Env = append([]string{"PATH=/bin:/sbin:/usr/bin"}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestVerifyRoot(t *testing.T) {
	script, err := os.ReadFile("files/base/dracut/99bootd-verify/bootd-verify-root.sh")
	if err != nil {
		t.Fatal(err)
	}
	image := "squashfs bytes"
	sum := sha256.Sum256([]byte(image))
	good := hex.EncodeToString(sum[:])
	tests := []struct {
		name, want string
		mounted    bool
	}{
		{"matching hash", good, true},
		{"other hash", strings.Repeat("0", 64), false},
		{"no hash on the command line", "", true}, // older bootd or a hand-made boot: dracut's behaviour
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := chroot(t, map[string]string{
				"sbin/dmsquash-live-root":           string(script),
				"sbin/dmsquash-live-root.unchecked": "#!/bin/sh\necho MOUNTED \"$1\"\n",
				// dracut-lib.sh stand-in: getarg answers from WANT, die exits like dracut's.
				"lib/dracut-lib.sh": "getarg() { echo \"$WANT\"; }\nwarn() { echo \"WARN $*\"; }\ninfo() { echo \"INFO $*\"; }\ndie() { echo \"DIE $*\"; exit 1; }\n",
				"tmp/rootfs.img":    image,
			})
			out, err := run(t, root, []string{"WANT=" + tt.want}, "/bin/sh", "/sbin/dmsquash-live-root", "/tmp/rootfs.img")
			if got := strings.Contains(out, "MOUNTED /tmp/rootfs.img"); got != tt.mounted || (err != nil) == tt.mounted {
				t.Fatalf("mounted %v (err %v), want %v:\n%s", got, err, tt.mounted, out)
			}
			if !tt.mounted && !strings.Contains(out, "has sha256 "+good) {
				t.Fatalf("the refusal does not name the image's hash:\n%s", out)
			}
		})
	}
}

func TestBootdNodeReport(t *testing.T) {
	script, err := os.ReadFile("files/base/bootd/bootd-node")
	if err != nil {
		t.Fatal(err)
	}
	root := chroot(t, map[string]string{
		"usr/libexec/bootd-node": string(script),
		"proc/cmdline":           "BOOT_IMAGE=vmlinuz bootd=http://10.80.0.1 quiet\n",
		"dev/null":               "", // a plain file will do for the redirections
		"tmp/.keep":              "",
		// slurmd's line with characters JSON must escape; curl records its arguments.
		"bin/slurmd": "#!/bin/sh\necho 'NodeName=c1 CPUs=8 RealMemory=15866 Features=\"a\\b\"'\necho 'UpTime=0-00:01:00'\n",
		"bin/curl":   "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > /tmp/curl.args\n",
	})
	if out, err := run(t, root, nil, "/bin/sh", "/usr/libexec/bootd-node", "report"); err != nil {
		t.Fatalf("bootd-node report: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(root, "tmp/curl.args"))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSpace(string(b)), "\n")
	var body string
	for i, a := range args {
		if a == "--data-binary" && i+1 < len(args) {
			body = args[i+1]
		}
	}
	var report struct {
		SlurmdC string   `json:"slurmd_c"`
		GPUs    []string `json:"gpus"`
	}
	if err := json.Unmarshal([]byte(body), &report); err != nil {
		t.Fatalf("report body %q is not JSON: %v", body, err)
	}
	if want := `NodeName=c1 CPUs=8 RealMemory=15866 Features="a\b"`; report.SlurmdC != want || len(report.GPUs) != 0 {
		t.Fatalf("report = %+v, want slurmd_c %q and no GPUs", report, want)
	}
	if !strings.Contains(string(b), "http://10.80.0.1/api/v1/node/hardware") || !strings.Contains(string(b), "600-1023") {
		t.Fatalf("curl was not asked for bootd's hardware endpoint from a privileged port:\n%s", b)
	}
}
