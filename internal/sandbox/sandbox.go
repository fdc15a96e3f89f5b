package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/labcluster/gpucluster/internal/child"
)

// Program is bubblewrap's command.
const Program = "bwrap"

// Hostname is the host name inside every sandbox: the builder's own never reaches a scriptlet
// (one that records it would make two builders' images differ).
const Hostname = "localhost"

// kept are the capabilities a sandboxed command keeps: what rpm needs to lay files down with
// their owners, modes and file capabilities and to chroot into the tree for scriptlets, and what
// scriptlets need to make and use accounts. Everything else goes, among them CAP_SYS_ADMIN
// (mount, sethostname, most of the kernel's knobs), CAP_DAC_READ_SEARCH (open_by_handle_at opens
// any file of the tree's file system by its handle, outside every mount: the "shocker" escape),
// CAP_SYS_PTRACE, CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_TIME, CAP_SYS_BOOT, CAP_NET_ADMIN,
// CAP_NET_RAW, CAP_LINUX_IMMUTABLE and CAP_AUDIT_WRITE. bubblewrap sets no_new_privs, so no
// program gains more by exec (setuid root, file capabilities).
var kept = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", // files of any owner and mode in the tree
	"CAP_SETFCAP",              // rpm's %caps (ping, newuidmap)
	"CAP_MKNOD",                // dracut makes /dev/console and a few more in the initramfs it builds
	"CAP_SYS_CHROOT",           // rpm chroots into the tree to run scriptlets
	"CAP_SETUID", "CAP_SETGID", // runuser, setpriv in scriptlets
	"CAP_KILL", // a scriptlet stopping what it started as another user (only the sandbox's processes are visible)
}

// Kept lists the capabilities a sandboxed command keeps, for tests and docs.
func Kept() []string { return append([]string(nil), kept...) }

// Options are what differs between sandboxed commands.
type Options struct {
	// Network shares the host's network namespace (and its name servers, see Image); without it
	// the command has a network namespace of its own with only a loopback interface, down.
	Network bool
	// ReadOnly are host paths a Tool command reads, bound read-only at the same place.
	ReadOnly []string
	// Env is the command's whole environment.
	Env []string
}

// hostEtc are the files of the host's /etc that host programs (rpm) read: the dynamic linker's
// cache, name service switch, the account files (rpm resolves owners in the tree, but glibc
// opens these first) and rpm's own configuration if the host has one. The rest of /etc (shadow,
// SSH host keys, credentials) stays out of the sandbox.
var hostEtc = []string{"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/nsswitch.conf",
	"/etc/passwd", "/etc/group", "/etc/localtime", "/etc/rpm"}

// topLinks are the top-level directories that hold programs and libraries besides /usr: merged
// /usr hosts (Debian 12, Rocky 9) have them as symlinks into /usr, others as directories.
var topLinks = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// Image returns argv to run inside tree, with tree as its root directory (as chroot would have
// it), confined as the package doc says. tree must already hold /proc and /dev (empty
// directories), which the sandbox mounts over in its own mount namespace only. With o.Network,
// the host's /etc/resolv.conf is bound over the tree's when the tree has that file: the name
// servers then are the build host's, as a chroot sharing the host network has them.
func Image(ctx context.Context, tree string, o Options, argv ...string) (*Cmd, error) {
	tree, err := checkTree(tree)
	if err != nil {
		return nil, err
	}
	args := []string{"--bind", tree, "/"}
	args = append(args, apiMounts("/")...)
	if o.Network && isRegular(filepath.Join(tree, "etc/resolv.conf")) {
		args = append(args, "--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf")
	}
	return command(ctx, o, args, argv)
}

// Tool returns the host program argv to run on tree (rpm --root=tree): the host's /usr, the
// library directories and a few files of /etc (hostEtc) read-only, o.ReadOnly read-only, tree
// writable at its own path with its own /proc and /dev mounted in it (where rpm's chroot puts
// scriptlets), and an empty /tmp. Nothing else of the host is there.
func Tool(ctx context.Context, tree string, o Options, argv ...string) (*Cmd, error) {
	tree, err := checkTree(tree)
	if err != nil {
		return nil, err
	}
	if len(argv) == 0 || !filepath.IsAbs(argv[0]) {
		return nil, fmt.Errorf("sandbox: the host program must be given by its absolute path, not %q", strings.Join(argv, " "))
	}
	args := []string{"--ro-bind", "/usr", "/usr"}
	for _, d := range topLinks {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return nil, err
			}
			args = append(args, "--symlink", target, d)
		case fi.IsDir():
			args = append(args, "--ro-bind", d, d)
		}
	}
	for _, p := range hostEtc {
		args = append(args, "--ro-bind-try", p, p)
	}
	args = append(args, apiMounts("/")...)
	args = append(args, "--tmpfs", "/tmp") // before the binds below, which may be under /tmp
	for _, p := range o.ReadOnly {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("sandbox: read-only path %q is not absolute", p)
		}
		args = append(args, "--ro-bind", p, p)
	}
	args = append(args, "--bind", tree, tree)
	args = append(args, apiMounts(tree)...)
	return command(ctx, o, args, argv)
}

// apiMounts are the sandbox's /proc (of its own PID namespace, read-only: /proc/sys and
// /proc/sysrq-trigger are the kernel's, not the sandbox's, and bubblewrap run by root leaves them
// writable) and a private /dev (null, zero, full, random, urandom, tty, pts, shm) under root.
func apiMounts(root string) []string {
	proc, dev := filepath.Join(root, "proc"), filepath.Join(root, "dev")
	return []string{"--proc", proc, "--remount-ro", proc, "--dev", dev}
}

// namespaces are the namespaces every sandbox has of its own.
var namespaces = []string{"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"}

func command(ctx context.Context, o Options, mounts, argv []string) (*Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("sandbox: no command")
	}
	filter, err := keyringFilter()
	if err != nil {
		return nil, err
	}
	args := append([]string{}, namespaces...)
	if !o.Network {
		args = append(args, "--unshare-net")
	}
	args = append(args, "--hostname", Hostname,
		"--die-with-parent", // and the sandbox's PID 1 takes every process in it along
		"--new-session",     // no controlling terminal to push input into (TIOCSTI)
		"--cap-drop", "ALL")
	for _, c := range kept {
		args = append(args, "--cap-add", c)
	}
	args = append(args, mounts...)
	args = append(args, "--chdir", "/", "--seccomp", "3", "--")
	cmd := child.Command(ctx, Program, append(args, argv...)...) // bwrap dies with imgbuild
	cmd.Env = o.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.ExtraFiles = []*os.File{filter}
	return &Cmd{Cmd: cmd, filter: filter}, nil
}

// Cmd is a sandboxed command. Run or CombinedOutput it once, as an exec.Cmd.
type Cmd struct {
	*exec.Cmd
	filter *os.File
}

// Run runs the command and waits for it.
func (c *Cmd) Run() error {
	defer c.filter.Close()
	return c.Cmd.Run()
}

// CombinedOutput runs the command and returns its standard output and error together.
func (c *Cmd) CombinedOutput() ([]byte, error) {
	var b bytes.Buffer
	c.Stdout, c.Stderr = &b, &b
	err := c.Run()
	return b.Bytes(), err
}

// checkTree wants an existing directory other than the host's root, as an absolute path.
func checkTree(tree string) (string, error) {
	abs, err := filepath.Abs(tree)
	if err != nil {
		return "", err
	}
	if abs == "/" {
		return "", errors.New("sandbox: the host's / is not an image tree")
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("sandbox: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("sandbox: %s is not a directory", abs)
	}
	return abs, nil
}

func isRegular(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().IsRegular()
}
