package tftpd

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// TestMain lets the test binary stand in for bootd: run as `<test binary> tftp-worker ...`, it
// is a TFTP worker, as bootd is when its serve command starts one.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == WorkerCommand {
		if err := RunWorker(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseEntry(t *testing.T) {
	tests := []struct {
		name      string
		line      string
		ok        bool
		level     logrus.Level
		msg       string
		fieldKeys string
	}{
		{"entry with fields", `{"bytes":74213,"client":"10.80.0.59:35955","duration":"21ms","level":"info","msg":"tftp transfer done","time":"2026-11-21T16:58:19Z"}`,
			true, logrus.InfoLevel, "tftp transfer done", "bytes,client,duration"},
		{"debug, no fields", `{"level":"debug","msg":"x","time":"t"}`, true, logrus.DebugLevel, "x", ""},
		{"a panic line", `panic: runtime error: index out of range`, false, 0, "", ""},
		{"no level", `{"msg":"x"}`, false, 0, "", ""},
		{"unknown level", `{"level":"loud","msg":"x"}`, false, 0, "", ""},
		{"message not text", `{"level":"info","msg":3}`, false, 0, "", ""},
		{"empty", ``, false, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			level, msg, fields, ok := parseEntry([]byte(tt.line))
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			var keys []string
			for k := range fields {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if level != tt.level || msg != tt.msg || strings.Join(keys, ",") != tt.fieldKeys {
				t.Errorf("got %v %q %v, want %v %q [%s]", level, msg, keys, tt.level, tt.msg, tt.fieldKeys)
			}
		})
	}
}

// startWorker runs Worker.Serve with this test binary as the worker, on a loopback socket.
func startWorker(t *testing.T, exe, root string) (addr string, hook *logtest.Hook, stop func() error) {
	t.Helper()
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr = conn.LocalAddr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Worker{Exe: exe, Root: root, Log: log}.Serve(ctx, conn) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(stopWait + 5*time.Second):
			return fmt.Errorf("Serve did not return after cancel")
		}
	}
	t.Cleanup(func() { _ = stop() })
	return addr, hook, stop
}

func fetch(t *testing.T, addr, name string) []byte {
	t.Helper()
	wt, err := client(t, addr, 1468, true).Receive(name, "octet")
	if err != nil {
		t.Fatalf("Receive(%q): %v", name, err)
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	return buf.Bytes()
}

// workerPids lists the running workers this process started.
func workerPids(t *testing.T) []int {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, d := range dirs {
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		cmdline, err2 := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || err2 != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[0] == "Z" || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		if args := strings.Split(string(cmdline), "\x00"); len(args) > 1 && args[1] == WorkerCommand {
			pid, _ := strconv.Atoi(filepath.Base(d))
			pids = append(pids, pid)
		}
	}
	return pids
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func hasEntry(hook *logtest.Hook, level logrus.Level, msg string) *logrus.Entry {
	for _, e := range hook.AllEntries() {
		if e.Level == level && e.Message == msg {
			return e
		}
	}
	return nil
}

// TestWorkerServesRelaysAndRestarts: files come from the worker process, its log arrives in the
// parent's logger at its own level with its fields, a killed worker is replaced (the socket
// outlives it), and cancelling stops the worker.
func TestWorkerServesRelaysAndRestarts(t *testing.T) {
	restore := restartDelay
	restartDelay = 50 * time.Millisecond
	t.Cleanup(func() { restartDelay = restore })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr, hook, stop := startWorker(t, exe, ipxeDir(t))

	if got := fetch(t, addr, "undionly.kpxe"); !bytes.Equal(got, content["undionly.kpxe"]) {
		t.Fatalf("got %d bytes, want the %d of the file", len(got), len(content["undionly.kpxe"]))
	}
	waitFor(t, "the worker's transfer log in the parent", func() bool { return hasEntry(hook, logrus.InfoLevel, "tftp transfer done") != nil })
	e := hasEntry(hook, logrus.InfoLevel, "tftp transfer done")
	if e.Data["file"] != "undionly.kpxe" || e.Data["duration"] == nil || e.Data["client"] == nil {
		t.Errorf("relayed entry lacks the worker's fields: %v", e.Data)
	}
	if _, ok := e.Data["time"]; ok {
		t.Errorf("relayed entry kept the worker's time as a field: %v", e.Data)
	}
	if hasEntry(hook, logrus.DebugLevel, "tftp transfer stats") == nil {
		t.Error("the worker's debug entries were not relayed at debug")
	}

	pids := workerPids(t)
	if len(pids) != 1 {
		t.Fatalf("%d workers running, want 1", len(pids))
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the death to be logged", func() bool {
		return hasEntry(hook, logrus.ErrorLevel, "tftp worker died; starting it again in 50ms") != nil
	})
	waitFor(t, "a new worker", func() bool { p := workerPids(t); return len(p) == 1 && p[0] != pids[0] })
	if got := fetch(t, addr, "ipxe.efi"); !bytes.Equal(got, content["ipxe.efi"]) {
		t.Fatalf("after the restart: got %d bytes, want the %d of the file", len(got), len(content["ipxe.efi"]))
	}

	if err := stop(); err != nil {
		t.Fatalf("Serve after cancel: %v, want nil", err)
	}
	if p := workerPids(t); len(p) != 0 {
		t.Fatalf("workers %v still running after Serve returned", p)
	}
}

// TestWorkerThatKeepsDying: a worker that cannot run is restarted a few times, its output is
// relayed as errors, and then Serve gives up with the reason.
func TestWorkerThatKeepsDying(t *testing.T) {
	restore := restartDelay
	restartDelay = 10 * time.Millisecond
	t.Cleanup(func() { restartDelay = restore })
	broken := filepath.Join(t.TempDir(), "bootd")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'panic: cannot serve' >&2\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	log, hook := logtest.NewNullLogger()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = Worker{Exe: broken, Root: ipxeDir(t), Log: log}.Serve(ctx, conn)
	if ctx.Err() != nil {
		t.Fatal("Serve kept restarting a worker that always dies")
	}
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("tftp worker died %d times", maxRestarts+1)) || !strings.Contains(err.Error(), "exit status 2") {
		t.Fatalf("Serve = %v, want it to give up after %d restarts with the exit status", err, maxRestarts)
	}
	e := hasEntry(hook, logrus.ErrorLevel, "tftp worker wrote an unexpected line")
	if e == nil || e.Data["worker_output"] != "panic: cannot serve" {
		t.Errorf("the worker's own words were not relayed: %v", e)
	}
}

// TestWorkerRunsAsNobody: with the iPXE files readable by anyone, a root bootd's worker runs as
// nobody and still serves them; with a directory only root can search, it stays root and says why.
func TestWorkerRunsAsNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (it checks the worker drops root); run it as root as CI does")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	open := ipxeDir(t)
	// t.TempDir makes 0700 directories: open the way down for other users.
	for dir := open; dir != os.TempDir() && dir != "/"; dir = filepath.Dir(dir) {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	closed := ipxeDir(t)
	if err := os.Chmod(closed, 0o700); err != nil { // only root may search it
		t.Fatal(err)
	}
	// go test builds this binary in a 0700 directory: copy it where nobody may run it.
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	exe = filepath.Join(open, "bootd")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, root, uid, user string
	}{
		{"world-readable files", open, "65534", "nobody"},
		{"a root-only directory", closed, "0", "root: " + closed + " is not readable by other users, so nobody could not serve it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, hook, stop := startWorker(t, exe, tt.root)
			defer func() {
				if t.Failed() {
					for _, e := range hook.AllEntries() {
						t.Logf("log: %s %s %v", e.Level, e.Message, e.Data)
					}
				}
			}()
			if got := fetch(t, addr, "undionly.kpxe"); !bytes.Equal(got, content["undionly.kpxe"]) {
				t.Fatalf("got %d bytes, want the %d of the file", len(got), len(content["undionly.kpxe"]))
			}
			pids := workerPids(t)
			if len(pids) != 1 {
				t.Fatalf("%d workers, want 1", len(pids))
			}
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pids[0]))
			if err != nil {
				t.Fatal(err)
			}
			var uids []string
			for _, l := range strings.Split(string(status), "\n") {
				if rest, ok := strings.CutPrefix(l, "Uid:"); ok {
					uids = strings.Fields(rest)
				}
			}
			if len(uids) != 4 || slices.ContainsFunc(uids, func(u string) bool { return u != tt.uid }) {
				t.Errorf("worker uids (real, effective, saved, fs) = %v, want all %s", uids, tt.uid)
			}
			if e := hasEntry(hook, logrus.InfoLevel, "tftp listening (in its own process)"); e == nil || e.Data["user"] != tt.user {
				t.Errorf("listening entry = %v, want user %q", e, tt.user)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
