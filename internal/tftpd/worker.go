package tftpd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// bootd serves TFTP from a child process of its own, a worker. A PXE ROM's transfer is lock-step:
// one 1468-byte block per round trip. In bootd's one Go process, while image downloads kept
// every P busy sending, a block's ACK waited for the runtime to poll the network (up to 10 ms a
// block, 25 ms median at 200 machines: BENCHMARKS.md). A process of its own has an idle thread
// asleep in epoll that the kernel wakes the moment the ACK lands, as dnsmasq is woken. TFTP suits
// this: it needs no state from the rest of bootd, only the iPXE directory.

// WorkerCommand is the bootd subcommand that runs a worker; the parent passes the bound socket as
// the worker's file descriptor 3.
const WorkerCommand = "tftp-worker"

const inheritedFD = 3

// restartDelay and maxRestarts: a worker that dies is started again after restartDelay (the
// socket stays bound in the parent, so requests queue meanwhile), but a worker that dies more
// than maxRestarts times within restartWindow is broken, and serving stops with its log.
// restartDelay is a variable for tests.
var restartDelay = time.Second

const (
	maxRestarts   = 5
	restartWindow = time.Minute
	// stopWait is how long a stopping worker may finish its transfers: each ends within
	// timeout × (retries+1) once its client stops answering.
	stopWait = timeout*(retries+1) + 5*time.Second
)

// Worker runs TFTP in a child process on a socket the parent bound, relays the child's log
// entries to Log, and starts it again when it dies.
type Worker struct {
	Exe  string // the bootd binary (os.Executable)
	Root string // the iPXE directory
	Log  logrus.FieldLogger
}

// Serve runs workers on conn until ctx is done, then stops the one running and returns nil. It
// closes conn.
func (w Worker) Serve(ctx context.Context, conn *net.UDPConn) error {
	sock, err := conn.File() // a duplicate the children inherit; conn itself is not needed
	conn.Close()
	if err != nil {
		return fmt.Errorf("tftp worker socket: %w", err)
	}
	defer sock.Close()
	cred, as := w.credential()
	w.Log.WithFields(logrus.Fields{"addr": conn.LocalAddr().String(), "user": as}).Info("tftp listening (in its own process)")
	var deaths []time.Time
	for {
		err := w.runOnce(ctx, sock, cred)
		if ctx.Err() != nil {
			return nil
		}
		deaths = append(recent(deaths, restartWindow), time.Now())
		if len(deaths) > maxRestarts {
			return fmt.Errorf("tftp worker died %d times within %s, last: %w", len(deaths), restartWindow, err)
		}
		w.Log.WithError(err).Errorf("tftp worker died; starting it again in %s", restartDelay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(restartDelay):
		}
	}
}

// credential is whom the worker runs as: nobody, when bootd runs as root and anyone may read the
// iPXE files, so a flaw in the handling of TFTP packets (which anyone on the segment may send)
// yields nobody's rights, not root's. The worker needs no more: it inherits its bound socket,
// and its transfers reply from unprivileged ports. Otherwise it runs as bootd does, and the
// second value says why.
func (w Worker) credential() (*syscall.Credential, string) {
	if os.Geteuid() != 0 {
		return nil, "bootd's own"
	}
	if blocker := notForOthers(w.Exe, 0o001); blocker != "" {
		return nil, "root: other users may not run " + blocker + ", so nobody could not start the worker"
	}
	if blocker := unreadableByOthers(w.Root); blocker != "" {
		return nil, "root: " + blocker + " is not readable by other users, so nobody could not serve it"
	}
	uid, gid := uint32(65534), uint32(65534)
	if u, err := user.Lookup("nobody"); err == nil {
		if n, err := strconv.ParseUint(u.Uid, 10, 32); err == nil {
			uid = uint32(n)
		}
		if n, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
			gid = uint32(n)
		}
	}
	return &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}, "nobody"
}

// unreadableByOthers names the first file or directory on the way to a servable iPXE binary that
// users other than its owner may not read or search, or returns "".
func unreadableByOthers(root string) string {
	for _, name := range Allowed {
		f, _, err := open(root, name)
		if err != nil {
			continue // not served at all
		}
		target := f.Name() // open resolved the links
		f.Close()
		if blocker := notForOthers(target, 0o004); blocker != "" {
			return blocker
		}
	}
	return ""
}

// notForOthers returns path if other users lack the permission bits want (0o004 read, 0o001
// execute) on it, or the first directory above it they may not search; else "".
func notForOthers(path string, want fs.FileMode) string {
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm()&want == 0 {
		return path
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm()&0o001 == 0 {
			return dir
		}
		if dir == "/" || dir == "." {
			return ""
		}
	}
}

func recent(ts []time.Time, window time.Duration) []time.Time {
	var out []time.Time
	for _, t := range ts {
		if time.Since(t) < window {
			out = append(out, t)
		}
	}
	return out
}

// runOnce starts one worker and returns when it exits, stopping it (SIGTERM, then SIGKILL
// after stopWait) once ctx is done.
func (w Worker) runOnce(ctx context.Context, sock *os.File, cred *syscall.Credential) error {
	cmd := exec.Command(w.Exe, WorkerCommand, "--ipxe-dir", w.Root)
	cmd.ExtraFiles = []*os.File{sock} // becomes fd 3
	cmd.Stdin, cmd.Stdout = nil, nil
	// Dies with bootd: a worker left behind would hold port 69 from the next bootd.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: cred}
	logs, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start tftp worker: %w", err)
	}
	relayed := make(chan struct{})
	go func() { relayLog(logs, w.Log); close(relayed) }()
	exited := make(chan error, 1)
	go func() { <-relayed; exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return exitError(err)
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(stopWait):
		_ = cmd.Process.Kill()
		<-exited
	}
	return nil
}

func exitError(err error) error {
	if err == nil {
		return errors.New("exited without being asked to")
	}
	return err
}

// relayLog turns the worker's log lines (logrus JSON) into entries of log, at their own level
// with their own fields, so bootd's log keeps one format and one level setting. A line that is
// not such an entry (a Go panic, say) is relayed as an error.
func relayLog(r io.Reader, log logrus.FieldLogger) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		level, msg, fields, ok := parseEntry(sc.Bytes())
		if !ok {
			log.WithField("worker_output", sc.Text()).Error("tftp worker wrote an unexpected line")
			continue
		}
		log.WithFields(fields).Log(level, msg)
	}
	// Drain what a scanner refused (a line over 1 MiB) so the worker never blocks on its stderr.
	_, _ = io.Copy(io.Discard, r)
}

// parseEntry reads one logrus JSON line: its level and message, and its other fields but the
// time (bootd stamps its own).
func parseEntry(line []byte) (logrus.Level, string, logrus.Fields, bool) {
	var fields logrus.Fields
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		return 0, "", nil, false
	}
	levelName, _ := fields[logrus.FieldKeyLevel].(string)
	msg, isString := fields[logrus.FieldKeyMsg].(string)
	level, err := logrus.ParseLevel(levelName)
	if err != nil || !isString {
		return 0, "", nil, false
	}
	for _, k := range []string{logrus.FieldKeyLevel, logrus.FieldKeyMsg, logrus.FieldKeyTime} {
		delete(fields, k)
	}
	return level, msg, fields, true
}

// RunWorker is the worker's side, `bootd tftp-worker --ipxe-dir D`: it serves D on the socket
// inherited as fd 3 until SIGTERM, or until its parent is gone, and logs JSON lines to stderr.
func RunWorker(args []string) error {
	fs := flag.NewFlagSet(WorkerCommand, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bootd %s --ipxe-dir D\n\nInternal: bootd serve runs this as its TFTP process, on a socket it passes as fd 3.\n", WorkerCommand)
	}
	root := fs.String("ipxe-dir", "", "directory with the iPXE binaries")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := logrus.New()
	log.SetOutput(os.Stderr)
	log.SetFormatter(&logrus.JSONFormatter{})
	log.SetLevel(logrus.DebugLevel) // the parent's logger filters
	// The parent checked the directory and logged what it holds; say nothing twice.
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	if _, err := servable(*root, quiet); err != nil {
		return err
	}
	s := &Server{root: *root, log: log}
	sock := os.NewFile(inheritedFD, "tftp socket")
	pc, err := net.FilePacketConn(sock)
	sock.Close()
	if err != nil {
		return fmt.Errorf("fd %d is not the tftp socket: %w", inheritedFD, err)
	}
	conn, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return fmt.Errorf("fd %d is not a UDP socket", inheritedFD)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx = whileParentLives(ctx)
	return s.serveConn(ctx, conn, false)
}

// whileParentLives is ctx, also ended when the parent process is gone: Pdeathsig covers a
// parent that dies, this covers the rarer case of the parent's starting thread ending first.
func whileParentLives(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	parent := os.Getppid()
	go func() {
		defer cancel()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if os.Getppid() != parent {
					return
				}
			}
		}
	}()
	return ctx
}
