package vcluster

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// initEnv names the environment variable that turns this binary into a node's init: its value
// is the path of the initSpec to apply.
const initEnv = "VCLUSTER_NODE_INIT"

// initReady is what init prints on stdout once the node's file systems are in place.
const initReady = "vcluster-init-ready"

// initSpec is what a node's init sets up inside its fresh mount and UTS namespaces.
type initSpec struct {
	Hostname string
	Overlays []overlayMount // mounted over Target, lower layer the host's Target
	Binds    []bindMount    // the NFS stand-in (share.go), after the overlays
	Tmpfs    []string       // fresh tmpfs mounts (/run, /tmp), after the binds: their sources may lie in /tmp
	Late     []File         // files and directories inside the tmpfs and bind mounts
	Devices  []Device       // stand-in device nodes: the node gets a /dev of its own (setupDev)
	DevLog   bool           // that /dev has log, the journal's syslog socket (systemd's /dev/log)
	DevStage string         // an empty directory on which that /dev is put together
}

// addDevices asks for a /dev of the node's own, put together under dir, with devices in it and,
// with devLog, /dev/log; with neither the node keeps the host's /dev.
func (s *initSpec) addDevices(dir string, devices []Device, devLog bool) error {
	if len(devices) == 0 && !devLog {
		return nil
	}
	for _, d := range devices {
		if p := filepath.Clean(d.Path); filepath.Dir(p) != "/dev" || p != d.Path {
			return fmt.Errorf("device %s: want a name directly under /dev", d.Path)
		}
	}
	s.Devices, s.DevLog, s.DevStage = devices, devLog, filepath.Join(dir, "dev")
	return os.MkdirAll(s.DevStage, 0o755)
}

type overlayMount struct {
	Target, Upper, Work string
}

func init() {
	path := os.Getenv(initEnv)
	if path == "" {
		return
	}
	if err := runInit(path); err != nil {
		fmt.Fprintf(os.Stderr, "vcluster init: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runInit is PID 1 of a node: it mounts the node's view of the file system, sets the host
// name, says it is ready, then reaps orphans until it is killed. When it dies the kernel kills
// every other process of the node's PID namespace.
func runInit(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var s initSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if os.Getpid() != 1 {
		return fmt.Errorf("not PID 1 of a new PID namespace (pid %d)", os.Getpid())
	}
	if err := setupMounts(&s); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	os.Unsetenv(initEnv)
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	fmt.Println(initReady)
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(-1, &ws, 0, nil); err == unix.ECHILD {
			// Nothing to reap yet: daemons that fork become our children later.
			var ts = unix.NsecToTimespec(200e6)
			_ = unix.Nanosleep(&ts, nil)
		}
	}
}

func setupMounts(s *initSpec) error {
	// Nothing mounted here may reach the host's mount table.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if s.DevStage != "" {
		if err := setupDev(s); err != nil {
			return err
		}
	}
	for _, o := range s.Overlays {
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", o.Target, o.Upper, o.Work)
		if err := unix.Mount("overlay", o.Target, "overlay", 0, opts); err != nil {
			return fmt.Errorf("mount overlay on %s (%s): %w", o.Target, opts, err)
		}
	}
	for _, b := range s.Binds {
		if err := unix.Mount(b.Source, b.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", b.Source, b.Target, err)
		}
	}
	for _, t := range s.Tmpfs {
		// Made in the node's overlay when the host has no such directory (/var/log/journal).
		if err := os.MkdirAll(t, 0o755); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", t, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", t, err)
		}
		if t == "/tmp" {
			if err := os.Chmod(t, 0o1777); err != nil {
				return err
			}
		}
	}
	for _, f := range s.Late {
		if err := writeFile("/", f); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes f (a regular file, or a directory when f.Mode has fs.ModeDir) under root
// with its mode and owner; missing parents become root-owned 0755 directories.
func writeFile(root string, f File) error {
	p := filepath.Join(root, f.Path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if f.Mode.IsDir() {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	} else {
		// Written fresh: a file of the lower layer is replaced, never written through.
		_ = os.Remove(p)
		if err := os.WriteFile(p, f.Data, 0o600); err != nil {
			return err
		}
	}
	if err := os.Lchown(p, f.UID, f.GID); err != nil {
		return err
	}
	return os.Chmod(p, f.Mode.Perm()|f.Mode&(os.ModeSticky|os.ModeSetuid|os.ModeSetgid))
}

// hostDevices are the host's device nodes a node's own /dev keeps (bound in), and hostDevDirs its
// directories of mounts (ptys, POSIX shared memory and message queues).
var (
	hostDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}
	hostDevDirs = []string{"pts", "shm", "mqueue"}
)

// setupDev gives the node a /dev of its own: a tmpfs put together on s.DevStage with the host's
// common device nodes and mount directories bound in and the stand-in devices made with mknod,
// then moved onto /dev. The host's /dev (devtmpfs) is one instance for every namespace: a node
// cannot make a device there without making it on the host.
func setupDev(s *initSpec) error {
	st := s.DevStage
	if err := unix.Mount("tmpfs", st, "tmpfs", unix.MS_NOSUID, "mode=0755"); err != nil {
		return fmt.Errorf("mount the node's /dev on %s: %w", st, err)
	}
	for _, name := range hostDevices {
		p := filepath.Join(st, name)
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+name, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", name, err)
		}
	}
	for _, name := range hostDevDirs {
		if fi, err := os.Stat("/dev/" + name); err != nil || !fi.IsDir() {
			continue
		}
		p := filepath.Join(st, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+name, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", name, err)
		}
	}
	links := map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
	if s.DevLog {
		// As systemd-journald-dev-log.socket makes it (Symlinks=/dev/log).
		links["log"] = journalDevLog
	}
	for link, target := range links {
		if err := os.Symlink(target, filepath.Join(st, link)); err != nil {
			return err
		}
	}
	for _, d := range s.Devices {
		p := filepath.Join(st, filepath.Base(d.Path))
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(d.Major, d.Minor))); err != nil {
			return fmt.Errorf("mknod %s: %w", d.Path, err)
		}
	}
	if err := unix.Mount(st, "/dev", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the node's /dev into place: %w", err)
	}
	return nil
}
