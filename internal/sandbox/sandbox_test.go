package sandbox_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/labcluster/gpucluster/internal/sandbox"
	"github.com/labcluster/gpucluster/internal/testkit/sandboxtest"
)

const busybox = "/bin/busybox"

// helperEnv makes the test binary, run inside a sandbox, try one call and report (TestMain).
const helperEnv = "SANDBOX_TEST_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helper(h))
	}
	os.Exit(m.Run())
}

// helper tries a call that must fail in the sandbox, prints what happened and exits 0 only when
// the call worked.
func helper(name string) int {
	var err error
	switch name {
	case "keyctl":
		_, err = unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_USER_KEYRING, 0, 0, 0)
	case "open_by_handle_at":
		err = openByHandle(os.Getenv("HANDLE_MOUNT"), os.Getenv("HANDLE_TYPE"), os.Getenv("HANDLE_BYTES"))
	default:
		err = fmt.Errorf("unknown helper %q", name)
	}
	if err != nil {
		fmt.Println(name+":", err)
		return 1
	}
	fmt.Println(name + ": worked")
	return 0
}

func openByHandle(mount, typ, handle string) error {
	b, err := hex.DecodeString(handle)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(typ)
	if err != nil {
		return err
	}
	dir, err := os.Open(mount)
	if err != nil {
		return err
	}
	defer dir.Close()
	fd, err := unix.OpenByHandleAt(int(dir.Fd()), unix.NewFileHandle(int32(n), b), unix.O_RDONLY)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("sandbox tests need root (bubblewrap's namespaces as imgbuild runs it); run them as root as CI does")
	}
	if _, err := exec.LookPath(sandbox.Program); err != nil {
		t.Fatal("needs bubblewrap (scripts/setup-debian.sh installs it)")
	}
}

// imageTree is a tree with busybox as /bin/sh and empty /proc and /dev.
func imageTree(t *testing.T) string {
	t.Helper()
	tree := filepath.Join(t.TempDir(), "tree")
	for _, d := range []string{"bin", "proc", "dev", "tmp", "root"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", busybox, filepath.Join(tree, "bin/busybox")).CombinedOutput(); err != nil {
		t.Fatal(string(out))
	}
	if err := os.Symlink("busybox", filepath.Join(tree, "bin/sh")); err != nil {
		t.Fatal(err)
	}
	return tree
}

var env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}

// inImage runs a shell command with the tree as its root.
func inImage(t *testing.T, tree string, o sandbox.Options, script string) (string, error) {
	t.Helper()
	if o.Env == nil {
		o.Env = env
	}
	cmd, err := sandbox.Image(context.Background(), tree, o, "/bin/sh", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// asTool runs a shell command as a host program acting on the tree.
func asTool(t *testing.T, tree string, o sandbox.Options, argv ...string) (string, error) {
	t.Helper()
	if o.Env == nil {
		o.Env = env
	}
	cmd, err := sandbox.Tool(context.Background(), tree, o, argv...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestEscapesHeld: every escape fails, as a layer command (the tree as root) and as a host
// program acting on the tree (rpm's place, whose scriptlets run chrooted into the tree), and
// leaves the host as it was.
func TestEscapesHeld(t *testing.T) {
	requireRoot(t)
	tree := imageTree(t)
	for _, e := range sandboxtest.Escapes(t) {
		t.Run("image/"+e.Name, func(t *testing.T) {
			out, err := inImage(t, tree, sandbox.Options{}, e.Command)
			if err == nil {
				t.Errorf("the escape worked:\n%s", out)
			}
			e.Held(t)
		})
		t.Run("tool/"+e.Name, func(t *testing.T) {
			out, err := asTool(t, tree, sandbox.Options{}, busybox, "sh", "-c", e.Command)
			if err == nil {
				t.Errorf("the escape worked:\n%s", out)
			}
			e.Held(t)
		})
		t.Run("chrooted tool/"+e.Name, func(t *testing.T) {
			out, err := asTool(t, tree, sandbox.Options{}, "/usr/sbin/chroot", tree, "/bin/sh", "-c", e.Command)
			if err == nil {
				t.Errorf("the escape worked:\n%s", out)
			}
			e.Held(t)
		})
	}
}

// TestEscapesWorkWithoutSandbox runs the same commands chrooted with the host's /proc mounted in
// the tree, as builds did before the sandbox, on the escapes whose effect is harmless: the
// escapes can fail only because of the sandbox.
func TestEscapesWorkWithoutSandbox(t *testing.T) {
	requireRoot(t)
	tree := imageTree(t)
	proc := filepath.Join(tree, "proc")
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(proc, unix.MNT_DETACH)
	harmless := []string{"signal a host process", "reach the host's loopback", "write core_pattern"}
	for _, e := range sandboxtest.Escapes(t) {
		if !slices.Contains(harmless, e.Name) {
			continue
		}
		t.Run(e.Name, func(t *testing.T) {
			cmd := exec.Command("chroot", tree, "/bin/sh", "-c", e.Command)
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("failed even without the sandbox: %v\n%s", err, out)
			}
		})
	}
}

// TestInside: what a command sees, and that it can do the work a build needs.
func TestInside(t *testing.T) {
	requireRoot(t)
	tree := imageTree(t)
	script := `set -e
busybox ls /dev > /root/dev
busybox hostname > /root/hostname
busybox grep -E '^Cap(Eff|Bnd|Amb):' /proc/self/status > /root/caps
busybox cat /proc/1/comm > /root/pid1
echo written > /root/file
busybox chown 900:900 /root/file
busybox ls /proc/sys/fs/binfmt_misc > /root/binfmt
`
	if out, err := inImage(t, tree, sandbox.Options{}, script); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(tree, "root", name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if got := strings.Fields(read("dev")); !slices.Equal(got, sandboxtest.UsualDev) {
		t.Errorf("/dev holds %v, want %v", got, sandboxtest.UsualDev)
	}
	if got := read("hostname"); got != sandbox.Hostname {
		t.Errorf("host name %q, want %q", got, sandbox.Hostname)
	}
	if got := read("pid1"); got != "bwrap" {
		t.Errorf("PID 1 is %q, want bubblewrap's reaper: not the sandbox's own PID namespace?", got)
	}
	if got, want := capLine(read("caps"), "CapEff"), keptMask(t); got != want {
		t.Errorf("effective capabilities %#x, want %#x (%v)", got, want, sandbox.Kept())
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(tree, "root/file"), &st); err != nil || st.Uid != 900 {
		t.Errorf("chown in the tree: uid %d, %v", st.Uid, err)
	}
	if got := read("binfmt"); got != "" {
		t.Errorf("binfmt_misc is mounted in the sandbox: %q", got)
	}
}

func capLine(s, name string) uint64 {
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n
		}
	}
	return 1<<64 - 1
}

func keptMask(t *testing.T) uint64 {
	byName := map[string]uint{"CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE,
		"CAP_FOWNER": unix.CAP_FOWNER, "CAP_FSETID": unix.CAP_FSETID, "CAP_SETFCAP": unix.CAP_SETFCAP,
		"CAP_MKNOD": unix.CAP_MKNOD, "CAP_SYS_CHROOT": unix.CAP_SYS_CHROOT, "CAP_SETUID": unix.CAP_SETUID,
		"CAP_SETGID": unix.CAP_SETGID, "CAP_KILL": unix.CAP_KILL}
	var m uint64
	for _, c := range sandbox.Kept() {
		bit, ok := byName[c]
		if !ok {
			t.Fatalf("no bit for %s", c)
		}
		m |= 1 << bit
	}
	for _, dangerous := range []uint{unix.CAP_SYS_ADMIN, unix.CAP_DAC_READ_SEARCH, unix.CAP_SYS_PTRACE, unix.CAP_SYS_MODULE, unix.CAP_NET_ADMIN} {
		if m&(1<<dangerous) != 0 {
			t.Fatalf("capability %d is kept", dangerous)
		}
	}
	return m
}

// TestNetwork: a command reaches the host's loopback only when its options ask for the network.
func TestNetwork(t *testing.T) {
	requireRoot(t)
	tree := imageTree(t)
	url := sandboxtest.Listen(t)
	for _, network := range []bool{false, true} {
		t.Run(fmt.Sprintf("network=%v", network), func(t *testing.T) {
			out, err := inImage(t, tree, sandbox.Options{Network: network}, "busybox wget -q -O - "+url)
			if (err == nil) != network {
				t.Errorf("reached the host: %v, want %v (%v)\n%s", err == nil, network, err, out)
			}
		})
	}
}

// TestNothingOutlives: a process a command leaves running dies with the sandbox.
func TestNothingOutlives(t *testing.T) {
	requireRoot(t)
	tree := imageTree(t)
	const mark = "6091.25"
	if out, err := inImage(t, tree, sandbox.Options{}, "(busybox sleep "+mark+" &) ; exit 0"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for left := sandboxtest.Processes("sleep " + mark); len(left) > 0; left = sandboxtest.Processes("sleep " + mark) {
		if time.Now().After(deadline) {
			t.Fatalf("still running after the sandbox ended: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKeyringsOutOfReach: root's keyrings on the host answer keyctl outside the sandbox and
// refuse it inside.
func TestKeyringsOutOfReach(t *testing.T) {
	requireRoot(t)
	if out, err := selfHelper(t, "keyctl", nil, ""); err != nil {
		t.Fatalf("keyctl fails outside the sandbox too, so this test cannot tell: %v\n%s", err, out)
	}
	out, err := selfHelper(t, "keyctl", nil, imageTree(t))
	if err == nil || !strings.Contains(out, "operation not permitted") {
		t.Errorf("keyctl in the sandbox: %v\n%s", err, out)
	}
}

// TestOpenByHandleRefused: a file outside the tree, on the tree's own file system, opens by its
// handle outside the sandbox and not inside (no CAP_DAC_READ_SEARCH).
func TestOpenByHandleRefused(t *testing.T) {
	requireRoot(t)
	tree := imageTree(t)
	secret := filepath.Join(filepath.Dir(tree), "outside")
	if err := os.WriteFile(secret, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, secret, 0)
	if err != nil {
		t.Fatalf("name_to_handle_at on the test's file system: %v", err)
	}
	handle := []string{"HANDLE_MOUNT=" + tree, "HANDLE_TYPE=" + strconv.Itoa(int(h.Type())), "HANDLE_BYTES=" + hex.EncodeToString(h.Bytes())}
	if out, err := selfHelper(t, "open_by_handle_at", handle, ""); err != nil {
		t.Fatalf("open_by_handle_at fails outside the sandbox too, so this test cannot tell: %v\n%s", err, out)
	}
	out, err := selfHelper(t, "open_by_handle_at", handle, tree)
	if err == nil || !strings.Contains(out, "operation not permitted") {
		t.Errorf("open_by_handle_at of a file outside the tree, in the sandbox: %v\n%s", err, out)
	}
}

// selfHelper runs this test binary as helper name, sandboxed on tree, or directly when tree is "".
func selfHelper(t *testing.T, name string, extraEnv []string, tree string) (string, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := append([]string{helperEnv + "=" + name}, extraEnv...)
	if tree == "" {
		cmd := exec.Command(exe)
		cmd.Env = e
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := asTool(t, tree, sandbox.Options{Env: e, ReadOnly: []string{exe}}, exe)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out, err
}

func TestCheck(t *testing.T) {
	requireRoot(t)
	if err := sandbox.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}
