package tftpd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/procstat"
	"github.com/labcluster/gpucluster/internal/testkit/testhook"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// TestMain lets the test binary stand in for bootd: run as `<test binary> tftp-worker ...`, it
// is a TFTP worker, as bootd is when its serve command starts one.
func TestMain(m *testing.M) {
	isWorker := len(os.Args) > 1 && os.Args[1] == WorkerCommand
	if addr := os.Getenv("TFTPD_TEST_PARENT"); addr != "" && !isWorker {
		serveAsTestParent(addr, os.Getenv("TFTPD_TEST_ROOT"))
	}
	if isWorker {
		if err := RunWorker(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(ExitStatus(err)) // as bootd's main does
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
		{"trailing junk", `{"level":"info","msg":"x"} {"level":"error","msg":"y"}`, false, 0, "", ""},
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
	return startWorkerAt(t, logrus.DebugLevel, exe, root)
}

func startWorkerAt(t *testing.T, level logrus.Level, exe, root string) (addr string, hook *logtest.Hook, stop func() error) {
	t.Helper()
	base, hook := logtest.NewNullLogger()
	base.SetLevel(level)
	log := base.WithField("listener", "tftp")
	conn := loopback(t)
	addr = conn.LocalAddr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	srv, err := New(root, log)
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- Worker{Exe: exe, Server: srv}.Serve(ctx, conn) }()
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

// checkServes fails the test unless addr serves name with the content ipxeDir gave it.
func checkServes(t *testing.T, addr, name string) {
	t.Helper()
	if got, want := fetch(t, addr, name), content[name]; !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes, want the %d of the file", name, len(got), len(want))
	}
}

// fetch gets name from addr, trying for a while: a worker may still be starting.
func fetch(t *testing.T, addr, name string) []byte {
	t.Helper()
	var got []byte
	var last error
	waitFor(t, "a TFTP transfer of "+name, func() bool {
		wt, err := client(t, addr, 1468, true).Receive(name, "octet")
		if err == nil {
			var buf bytes.Buffer
			_, err = wt.WriteTo(&buf)
			got = buf.Bytes()
		}
		last = err
		return err == nil
	})
	if last != nil {
		t.Fatal(last)
	}
	return got
}

// workerPids lists the running workers this process started.
func workerPids(t *testing.T) []int {
	t.Helper()
	return runningWorkers(func(ppid int, _ []string) bool { return ppid == os.Getpid() })
}

// workersServing lists the running workers, anyone's children, that serve root.
func workersServing(root string) []int {
	return runningWorkers(func(_ int, args []string) bool { return len(args) > 3 && args[3] == root })
}

// runningWorkers lists the live (not zombie) tftp-worker processes that keep accepts, given their
// parent's pid and their arguments.
func runningWorkers(keep func(ppid int, args []string) bool) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		if err != nil || len(args) < 2 || args[1] != WorkerCommand {
			continue
		}
		if st, err := procstat.Read(pid); err == nil && st.State != "Z" && keep(st.PPid, args) {
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
	testhook.Set(t, &restartDelay, 50*time.Millisecond)
	exe := testExe(t)
	addr, hook, stop := startWorker(t, exe, ipxeDir(t))

	checkServes(t, addr, "undionly.kpxe")
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
	checkServes(t, addr, "ipxe.efi") // from the new worker

	if err := stop(); err != nil {
		t.Fatalf("Serve after cancel: %v, want nil", err)
	}
	if p := workerPids(t); len(p) != 0 {
		t.Fatalf("workers %v still running after Serve returned", p)
	}
}

// A worker that has served is started again however often it is killed, ever slower past
// maxRestarts: killing it must not stop bootd's DHCP and HTTP with it.
func TestWorkerThatServedIsAlwaysRestarted(t *testing.T) {
	// The window is shorter than the longer waits (counted within a window, the deaths would
	// fall out of it and the wait drop back to the first), and long enough that a worker the
	// test kills at once lived less than it on a loaded machine.
	testhook.Set(t, &restartDelay, 150*time.Millisecond)
	testhook.Set(t, &restartWindow, time.Second)
	addr, hook, stop := startWorker(t, testExe(t), ipxeDir(t))
	checkServes(t, addr, "undionly.kpxe")
	for i := range maxRestarts + 4 {
		var pids []int
		waitFor(t, "a worker", func() bool { pids = workerPids(t); return len(pids) == 1 })
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("the worker started again after kill %d", i+1), func() bool { p := workerPids(t); return len(p) == 1 && p[0] != pids[0] })
	}
	checkServes(t, addr, "ipxe.efi")
	for _, wait := range []time.Duration{8 * restartDelay, 16 * restartDelay} { // doubled three and four times
		if hasEntry(hook, logrus.ErrorLevel, fmt.Sprintf("tftp worker died; starting it again in %s", wait)) == nil {
			t.Errorf("no wait of %s logged after %d deaths in a row", wait, maxRestarts+4)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("Serve after cancel: %v, want nil", err)
	}
}

// TestWorkerThatKeepsDying: a worker that cannot run is restarted a few times, its output is
// relayed as errors, and then Serve gives up with the reason.
func TestWorkerThatKeepsDying(t *testing.T) {
	testhook.Set(t, &restartDelay, 10*time.Millisecond)
	broken := filepath.Join(t.TempDir(), "bootd")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'panic: cannot serve' >&2\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	log, hook := logtest.NewNullLogger()
	conn := loopback(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv, err := New(ipxeDir(t), log)
	if err != nil {
		t.Fatal(err)
	}
	err = Worker{Exe: broken, Server: srv}.Serve(ctx, conn)
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
	exe := testExe(t)
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
	// Links from a root-only directory to files anyone may read: the worker walks the directory.
	links := t.TempDir()
	for name := range content {
		if err := os.Symlink(filepath.Join(open, name), filepath.Join(links, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(links, 0o700); err != nil {
		t.Fatal(err)
	}
	// A binary refused to nobody in a way no permission bit shows (a sandbox, say): it exits as
	// the worker does when it may not do its work as its user.
	rootOnly := filepath.Join(open, "bootd-root-only")
	script := fmt.Sprintf("#!/bin/sh\n[ \"$(id -u)\" = 0 ] || exit %d\nexec %s \"$@\"\n", exitRefused, exe)
	if err := os.WriteFile(rootOnly, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	daemon, err := user.Lookup("daemon")
	if err != nil {
		t.Fatal(err)
	}
	// A file all may read by its mode bits but nobody's group may not: group bits come first.
	grouped := ipxeDir(t)
	gid, _ := strconv.Atoi(nobody.Gid)
	if err := os.Chown(filepath.Join(grouped, "ipxe.efi"), 0, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(grouped, "ipxe.efi"), 0o604); err != nil {
		t.Fatal(err)
	}
	testhook.Set(t, &restartDelay, 10*time.Millisecond)
	tests := []struct {
		name, exe, root, uid, user string
		fallback                   bool     // the first start as nobody fails, the next runs as root
		killed                     bool     // the worker is killed once it served; the next must be the same user
		users                      []string // workerUsers for the case (nil: as built)
	}{
		{"world-readable files", exe, open, nobody.Uid, "nobody", false, true, nil},
		{"a root-only directory", exe, closed, "0", "root: " + closed + " is not readable by other users, so the worker's user could not serve it", false, false, nil},
		{"links out of a root-only directory", exe, links, "0", "root: " + links + " is not readable by other users, so the worker's user could not serve it", false, false, nil},
		{"a start that fails for nobody", rootOnly, open, "0", "nobody", true, false, nil},
		{"a file nobody's group may not read", exe, grouped, "0", "nobody", true, false, nil},
		// Debian's daemon user stands for bootd-tftp, which dist/bootd.sysusers creates.
		{"its own user when the host has it", exe, open, daemon.Uid, "daemon", false, true, []string{"bootd-test-no-such-user", "daemon"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			users := tt.users
			if users == nil {
				users = []string{"nobody"} // as on a host without bootd-tftp
			}
			testhook.Set(t, &workerUsers, users)
			addr, hook, stop := startWorker(t, tt.exe, tt.root)
			defer func() {
				if t.Failed() {
					for _, e := range hook.AllEntries() {
						t.Logf("log: %s %s %v", e.Level, e.Message, e.Data)
					}
				}
			}()
			for name := range content {
				checkServes(t, addr, name)
			}
			pids := workerPids(t)
			if len(pids) != 1 {
				t.Fatalf("%d workers, want 1", len(pids))
			}
			checkUids(t, pids[0], tt.uid)
			checkConfined(t, pids[0], tt.uid)
			if tt.killed {
				if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the next worker", func() bool { p := workerPids(t); return len(p) == 1 && p[0] != pids[0] })
				fetch(t, addr, "undionly.kpxe")
				checkUids(t, workerPids(t)[0], tt.uid)
				checkConfined(t, workerPids(t)[0], tt.uid)
			}
			if e := hasEntry(hook, logrus.InfoLevel, "tftp listening (in its own process)"); e == nil || e.Data["user"] != tt.user {
				t.Errorf("listening entry = %v, want user %q", e, tt.user)
			}
			if fell := hasEntry(hook, logrus.WarnLevel, "tftp worker could not start as its user; running it as bootd's own") != nil; fell != tt.fallback {
				t.Errorf("fell back to root: %v, want %v", fell, tt.fallback)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// checkConfined fails unless pid is not dumpable (the kernel then gives its /proc files to root,
// whoever it runs as), has no_new_privs set and is process 1 of a PID namespace of its own.
func checkConfined(t *testing.T, pid int, uid string) {
	t.Helper()
	// A dumpable worker's /proc files belong to its user, a not dumpable one's to root: that
	// tells only for a worker that does not run as root.
	if uid != "0" {
		var st syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/environ", pid), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 0 {
			t.Errorf("worker %d's /proc files belong to uid %d: it is dumpable, so its user's other processes may trace it", pid, st.Uid)
		}
	}
	if got := statusField(t, pid, "NoNewPrivs"); got != "1" {
		t.Errorf("worker %d: NoNewPrivs %q, want 1", pid, got)
	}
	if got, want := statusField(t, pid, "NSpid"), fmt.Sprintf("%d\t1", pid); got != want {
		t.Errorf("worker %d: NSpid %q, want %q (process 1 of a PID namespace of its own)", pid, got, want)
	}
}

// checkUids fails unless pid's real, effective, saved and file system uids are all uid.
func checkUids(t *testing.T, pid int, uid string) {
	t.Helper()
	uids := strings.Fields(statusField(t, pid, "Uid"))
	if len(uids) != 4 || slices.ContainsFunc(uids, func(u string) bool { return u != uid }) {
		t.Errorf("worker %d uids (real, effective, saved, fs) = %v, want all %s", pid, uids, uid)
	}
}

// statusField is the value of key in /proc/<pid>/status, as the kernel writes it (tabs kept).
func statusField(t *testing.T, pid int, key string) string {
	t.Helper()
	v, err := procstat.Status(pid, key)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRelayLog: what the worker writes reaches bootd's log as bootd's own entries, and nothing
// it writes can pass for another part of bootd, raise a level above error, or stop the relay.
func TestRelayLog(t *testing.T) {
	long := `{"level":"info","msg":"` + strings.Repeat("x", maxLogLine) + `"}`
	tests := []struct {
		name  string
		input string
		want  []string // level msg listener [extra field=value]
		ready int
	}{
		{"entries keep level and fields, listener stays bootd's",
			`{"level":"info","msg":"tftp transfer done","file":"undionly.kpxe","listener":"dhcp","time":"t"}` + "\n" +
				`{"level":"debug","msg":"stats"}` + "\n",
			[]string{"info tftp transfer done tftp file=undionly.kpxe worker_fields_dropped=1", "debug stats tftp"}, 0},
		{"levels above error are capped", `{"level":"panic","msg":"boom"}` + "\n" + `{"level":"fatal","msg":"bang"}` + "\n",
			[]string{"error boom tftp", "error bang tftp"}, 0},
		{"the ready entry is a signal, once", `{"level":"info","msg":"tftp worker ready","tftp_worker_ready":true}` + "\n" +
			`{"level":"info","msg":"tftp worker ready","tftp_worker_ready":true}` + "\n", nil, 1},
		{"a panic is relayed as an error", "panic: runtime error\n\ngoroutine 1 [running]:\n",
			[]string{"error tftp worker wrote an unexpected line tftp worker_output=panic: runtime error", "error tftp worker wrote an unexpected line tftp worker_output=goroutine 1 [running]:"}, 0},
		{"a line too long is cut, and the relay goes on", long + "\n" + `{"level":"warning","msg":"after"}` + "\n",
			[]string{"error tftp worker wrote an unexpected line tftp cut=true", "warning after tftp"}, 0},
		{"a last line without its newline", `{"level":"info","msg":"last"}`, []string{"info last tftp"}, 0},
		{"keys that could forge a text log line are dropped, messages quoted",
			`{"level":"info","msg":"a\nlevel=error msg=forged","x\nlevel=error msg=forged listener=dhcp\nzz":1,"file":"f"}` + "\n",
			[]string{`info "a\nlevel=error msg=forged" tftp file=f worker_fields_dropped=1`}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, hook := logtest.NewNullLogger()
			base.SetLevel(logrus.DebugLevel)
			log := base.WithField("listener", "tftp")
			readies := 0
			relayLog(strings.NewReader(tt.input), log, reservedKeys(log), func() { readies++ }, func(Counts) {}, nil)
			var got []string
			for _, e := range hook.AllEntries() {
				line := fmt.Sprintf("%s %s %v", e.Level, e.Message, e.Data["listener"])
				for _, k := range []string{"file", "worker_output", "cut", "worker_fields_dropped"} {
					if v, ok := e.Data[k]; ok && v != false {
						line += fmt.Sprintf(" %s=%v", k, v)
					}
				}
				if k := "worker_output"; e.Data["cut"] == true {
					line = strings.Replace(line, fmt.Sprintf(" %s=%v", k, e.Data[k]), "", 1)
					if n := len(e.Data[k].(string)); n != maxLogLine {
						t.Errorf("cut line holds %d bytes, want %d", n, maxLogLine)
					}
				}
				got = append(got, line)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") || readies != tt.ready {
				t.Errorf("relayed:\n%s\nready %d times; want:\n%s\nready %d times", strings.Join(got, "\n"), readies, strings.Join(tt.want, "\n"), tt.ready)
			}
		})
	}
}

// TestWorkerStopsWhenAskedOrKilled: cancelling closes the lifeline and a serving worker leaves by
// itself; one that ignores its lifeline is killed after stopWait.
func TestWorkerStopsWhenAskedOrKilled(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	stubborn := filepath.Join(dir, "stubborn")
	// Its pid as bootd sees it: $$ is 1 in the worker's own PID namespace, but /proc (the host's
	// mount) opened by the shell itself names it from outside.
	script := "#!/bin/sh\nread -r pid _ < /proc/self/stat\necho $pid > " + pidFile + "\nexec sleep 1000 </dev/null\n"
	if err := os.WriteFile(stubborn, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	exe := testExe(t)

	t.Run("a serving worker leaves at the end of its lifeline", func(t *testing.T) {
		testhook.Set(t, &stopWait, time.Minute) // never reached: a kill would show as a stop this slow
		addr, _, stop := startWorker(t, exe, ipxeDir(t))
		fetch(t, addr, "undionly.kpxe") // it is serving
		pids := workerPids(t)
		start := time.Now()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("stopping took %s: the worker did not leave by itself", d)
		}
		if len(pids) != 1 || procstat.Alive(pids[0]) {
			t.Fatalf("worker %v still running after Serve returned", pids)
		}
	})
	t.Run("a worker that ignores its lifeline is killed", func(t *testing.T) {
		testhook.Set(t, &stopWait, 200*time.Millisecond)
		_, _, stop := startWorker(t, stubborn, ipxeDir(t))
		var pid int
		waitFor(t, "the stubborn worker to start", func() bool {
			b, err := os.ReadFile(pidFile)
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil && pid > 0
		})
		start := time.Now()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < stopWait {
			t.Errorf("Serve returned after %s, before stopWait (%s): it did not wait for the worker", d, stopWait)
		}
		if procstat.Alive(pid) {
			t.Fatalf("worker %d still running after Serve returned", pid)
		}
	})
}

// TestWorkerDebugFollowsBootd: the worker sends debug entries only when bootd's log shows them.
func TestWorkerDebugFollowsBootd(t *testing.T) {
	exe := testExe(t)
	for _, tt := range []struct {
		level logrus.Level
		debug bool
	}{{logrus.InfoLevel, false}, {logrus.DebugLevel, true}} {
		t.Run(tt.level.String(), func(t *testing.T) {
			addr, hook, stop := startWorkerAt(t, tt.level, exe, ipxeDir(t))
			fetch(t, addr, "undionly.kpxe")
			pids := workerPids(t)
			if len(pids) != 1 {
				t.Fatalf("%d workers, want 1", len(pids))
			}
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pids[0]))
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(strings.Split(string(cmdline), "\x00"), "--debug"); got != tt.debug {
				t.Errorf("worker run with --debug: %v, want %v", got, tt.debug)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if got := hasEntry(hook, logrus.DebugLevel, "tftp transfer stats") != nil; got != tt.debug {
				t.Errorf("debug entries in bootd's log: %v, want %v", got, tt.debug)
			}
		})
	}
}

// TestWorkerDiesWithBootd: when the process that runs Worker.Serve is killed, its worker goes
// too and frees the port, so a restarted bootd can bind it.
func TestWorkerDiesWithBootd(t *testing.T) {
	probe, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.LocalAddr().String()
	probe.Close()
	exe := testExe(t)
	root := ipxeDir(t)
	parent := exec.Command(exe, "-test.run=^$")
	parent.Env = append(os.Environ(), "TFTPD_TEST_PARENT="+addr, "TFTPD_TEST_ROOT="+root)
	parent.Stderr = os.Stderr
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })
	// Served by a worker: the parent process does not answer TFTP itself.
	var got []byte
	waitFor(t, "the worker to serve", func() bool {
		wt, err := client(t, addr, 1468, false).Receive("undionly.kpxe", "octet")
		if err != nil {
			return false
		}
		var buf bytes.Buffer
		_, err = wt.WriteTo(&buf)
		got = buf.Bytes()
		return err == nil
	})
	if !bytes.Equal(got, content["undionly.kpxe"]) {
		t.Fatalf("got %d bytes, want the %d of the file", len(got), len(content["undionly.kpxe"]))
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	waitFor(t, "the port to be free again", func() bool {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	waitFor(t, "the worker to be gone", func() bool { return len(workersServing(root)) == 0 })
}

// serveAsTestParent is TestWorkerDiesWithBootd's parent process: Worker.Serve until killed.
func serveAsTestParent(addr, root string) {
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exe, _ := os.Executable()
	log := logrus.New()
	log.SetOutput(io.Discard)
	srv, err := New(root, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, Worker{Exe: exe, Server: srv}.Serve(context.Background(), conn))
	os.Exit(1)
}

// TestWorkerWithoutPIDNamespace: where no PID namespace can be made (a container, say: here a
// clone the kernel refuses), the worker still serves, in bootd's, and the log says why.
func TestWorkerWithoutPIDNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (only root asks for a PID namespace); run it as root as CI does")
	}
	testhook.Set(t, &newPIDNamespace, syscall.CLONE_NEWUSER|syscall.CLONE_FS) // EINVAL: the pair is refused
	exe := testExe(t)
	addr, hook, stop := startWorker(t, exe, ipxeDir(t))
	checkServes(t, addr, "undionly.kpxe")
	pids := workerPids(t)
	if len(pids) != 1 {
		t.Fatalf("%d workers, want 1", len(pids))
	}
	if got := statusField(t, pids[0], "NSpid"); got != strconv.Itoa(pids[0]) {
		t.Errorf("worker %d: NSpid %q, want it in bootd's PID namespace alone", pids[0], got)
	}
	e := hasEntry(hook, logrus.WarnLevel, "tftp worker runs in bootd's PID namespace (it could not have one of its own): what a compromised worker starts could outlive it")
	if e == nil {
		t.Fatal("no warning that the worker shares bootd's PID namespace")
	}
	if err, _ := e.Data[logrus.ErrorKey].(error); err == nil || !strings.Contains(err.Error(), "invalid argument") {
		t.Errorf("the warning's error = %v, want the clone's refusal", e.Data[logrus.ErrorKey])
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestStartRefused: only exec's permission error and the worker's own exitRefused mean "cannot
// run as this user"; a crash, a signal's default exit or a kill must never buy the next worker
// bootd's own user.
func TestStartRefused(t *testing.T) {
	run := func(script string) error { return exec.Command("sh", "-c", script).Run() }
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"exec refused", &os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.EACCES}, true},
		{"the worker's refusal", run(fmt.Sprintf("exit %d", exitRefused)), true},
		{"an error exit", run("exit 1"), false},
		{"Go's exit on a runtime failure or an unhandled signal", run("exit 2"), false},
		{"killed", run("kill -9 $$"), false},
		{"no error", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := startRefused(tt.err); got != tt.want {
				t.Errorf("startRefused(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// testExe is this test binary, which runs as a worker when started with the worker command.
func testExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// TestExitStatus: bootd exits 3 only for the worker's refusal, and 1 for other errors, even one
// that wraps another program's exit (ssh-keygen's, say).
func TestExitStatus(t *testing.T) {
	child := exec.Command("sh", "-c", "exit 7").Run()
	for _, tt := range []struct {
		name string
		err  error
		want int
	}{
		{"refusal", fmt.Errorf("start: %w", &refusedError{errors.New("may not open")}), exitRefused},
		{"another program's exit", fmt.Errorf("keygen: %w", child), 1},
		{"plain", errors.New("x"), 1},
	} {
		if got := ExitStatus(tt.err); got != tt.want {
			t.Errorf("%s: ExitStatus = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// Only the errnos clone gives when it refuses a namespace cost the worker its PID namespace; a
// passing shortage or exec's refusal is retried or handled as it is. Start reports a failed
// clone, like any failure before exec, as a fork/exec PathError.
func TestNamespaceRefused(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.EPERM}, true},
		{&os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.EINVAL}, true},
		{&os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.ENOSPC}, true},
		{&os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.EAGAIN}, false},
		{&os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.ENOMEM}, false},
		{&os.PathError{Op: "fork/exec", Path: "/x", Err: syscall.EACCES}, false},
	} {
		t.Run(tt.err.Error(), func(t *testing.T) {
			if got := namespaceRefused(tt.err); got != tt.want {
				t.Errorf("namespaceRefused(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
