// Package sandboxtest holds the escapes a build sandbox must hold against (a layer command or a
// package scriptlet reaching the build host: issue 28's H1), as busybox shell commands, each with
// the check on the host that it had no effect there.
package sandboxtest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Escape is one attempt. Command exits 0 only when the attempt worked; Held fails t when the
// host shows the attempt's effect.
type Escape struct {
	Name    string
	Command string
	Held    func(t testing.TB)
}

// Escapes returns the attempts, aimed at a directory, a mount source, a process and a loopback
// listener of this test on the host (cleaned up with t). Every command uses busybox's applets
// by name (busybox mount, ...), so the image needs nothing but busybox on PATH.
func Escapes(t testing.TB) []Escape {
	t.Helper()
	hostDir := t.TempDir() // exists on the host, not in any image tree
	marker := filepath.Join(hostDir, "escaped")
	mountTag := fmt.Sprintf("sandbox-escape-%d", os.Getpid())
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	corePattern := readFile(t, "/proc/sys/kernel/core_pattern")
	url := listen(t)
	markerAbsent := func(t testing.TB) {
		t.Helper()
		if _, err := os.Lstat(marker); err == nil {
			t.Errorf("%s was written on the host", marker)
		}
	}
	return []Escape{
		{
			Name: "write a host file through /proc/PID/root",
			Command: fmt.Sprintf(`for p in /proc/[0-9]* /proc/$PPID; do
  echo escaped > "$p/root%s/escaped" && exit 0
done
exit 1`, hostDir),
			Held: markerAbsent,
		},
		{
			Name:    "mount a tmpfs",
			Command: fmt.Sprintf("busybox mkdir -p /mnt && busybox mount -t tmpfs %s /mnt", mountTag),
			Held: func(t testing.TB) {
				t.Helper()
				if strings.Contains(readFile(t, "/proc/self/mountinfo"), mountTag) {
					t.Errorf("a tmpfs %s is mounted in the host's mount namespace", mountTag)
				}
			},
		},
		{
			Name:    "set the host name",
			Command: "busybox hostname escaped",
			Held:    hostnameKept(hostname),
		},
		{
			Name:    "set the host name through /proc/sys",
			Command: "echo escaped > /proc/sys/kernel/hostname",
			Held:    hostnameKept(hostname),
		},
		{
			// Writes the value it read back, so a sandbox that fails changes nothing.
			Name:    "write core_pattern",
			Command: `p=$(busybox cat /proc/sys/kernel/core_pattern) && printf '%s\n' "$p" > /proc/sys/kernel/core_pattern`,
			Held: func(t testing.TB) {
				t.Helper()
				if got := readFile(t, "/proc/sys/kernel/core_pattern"); got != corePattern {
					t.Errorf("core_pattern changed: %q -> %q", corePattern, got)
				}
			},
		},
		{
			// h only prints the SysRq help to the kernel log, should the write pass.
			Name:    "write sysrq-trigger",
			Command: "echo h > /proc/sysrq-trigger",
			Held:    func(testing.TB) {},
		},
		{
			Name:    "read the host's /sys",
			Command: "busybox cat /sys/kernel/uevent_seqnum || busybox ls /sys/class/net/lo",
			Held:    func(testing.TB) {},
		},
		{
			// /dev/kmsg's numbers: writing it would put a line into the host's kernel log.
			Name:    "open a device node it made",
			Command: "busybox mknod /kmsg-escape c 1 11; echo escaped > /kmsg-escape; s=$?; busybox rm -f /kmsg-escape; exit $s",
			Held:    func(testing.TB) {},
		},
		{
			Name:    "signal a host process",
			Command: fmt.Sprintf("busybox kill -0 %d", os.Getpid()),
			Held:    func(testing.TB) {},
		},
		{
			Name:    "reach the host's loopback",
			Command: fmt.Sprintf("busybox wget -q -O /dev/null %s", url),
			Held:    func(testing.TB) {},
		},
	}
}

// Listen serves HTTP on the host's loopback for t and returns its URL: what a command with
// network reaches and one without cannot.
func Listen(t testing.TB) string { t.Helper(); return listen(t) }

func listen(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "host") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/"
}

func hostnameKept(want string) func(testing.TB) {
	return func(t testing.TB) {
		t.Helper()
		if got, err := os.Hostname(); err != nil || got != want {
			t.Errorf("host name changed: %q -> %q (%v)", want, got, err)
		}
	}
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Processes lists the command lines of the host's processes that contain s.
func Processes(s string) []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), s) {
			found = append(found, d+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

// UsualDev are the entries of bubblewrap's private /dev.
var UsualDev = []string{"core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero"}
