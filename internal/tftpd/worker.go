package tftpd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// bootd serves TFTP from a child process of its own, a worker. A PXE ROM's transfer is lock-step:
// one 1468-byte block per round trip. In bootd's one Go process, while image downloads kept
// every P busy sending, a block's ACK waited for the runtime to poll the network (up to 10 ms a
// block, 25 ms median at 200 machines: docs/benchmarks-log.md, item 6). A process of its own has an idle thread
// asleep in epoll that the kernel wakes the moment the ACK lands, as dnsmasq is woken. TFTP suits
// this: it needs no state from the rest of bootd, only the iPXE directory.

// WorkerCommand is the bootd subcommand that runs a worker (RunWorker). The parent passes the
// bound socket as the worker's file descriptor 3, the files it must be able to serve, and a
// lifeline as its stdin: the worker stops when its stdin ends.
const WorkerCommand = "tftp-worker"

const inheritedFD = 3

// restartDelay and maxRestarts: a worker that dies is started again after restartDelay (the
// socket stays bound in the parent, so requests queue meanwhile). Deaths count in a row, of
// workers that lived less than restartWindow. Past maxRestarts of them, a worker that never
// served is broken (a bad install), and serving stops with its log; one that has served is
// started again, waiting twice as long after each further death, up to maxBackoff restart
// delays: whoever kills it (a hostile packet, another process of its user) must not take DHCP
// and HTTP down with it.
// stopWait is how long a stopping worker may finish its transfers: each ends within
// timeout × (retries+1) once its client stops answering. Variables for tests.
var (
	restartDelay  = time.Second
	restartWindow = time.Minute
	stopWait      = timeout*(retries+1) + 5*time.Second
)

const (
	maxRestarts = 5
	maxBackoff  = 30
)

// Worker runs TFTP in a child process on a socket the parent bound, relays the child's log
// entries to the Server's log (bootd's, as New was given it), and starts it again when it dies.
type Worker struct {
	Exe    string        // the bootd binary (os.Executable): it must run RunWorker for WorkerCommand
	Server *Server       // what to serve: its directory and the files New found there
	Meter  TransferMeter // told the transfers the workers report (nil: counted nowhere)
	// OnSent, when set, hears of every file the worker sent whole, and to whom (bootd's loader
	// watch: which PC fetched which iPXE binary).
	OnSent func(client netip.Addr, file string)
}

// Serve runs workers on conn until ctx is done, then stops the one running and returns nil. It
// closes conn.
func (w Worker) Serve(ctx context.Context, conn *net.UDPConn) error {
	addr := conn.LocalAddr().String()
	sock, err := conn.File() // a duplicate the children inherit; conn itself is not needed
	conn.Close()
	if err != nil {
		return fmt.Errorf("tftp worker socket: %w", err)
	}
	defer sock.Close()
	cred, as := w.credential()
	l := &launch{cred: cred, clone: ownPIDNamespace()}
	w.Server.log.WithFields(logrus.Fields{"addr": addr, "user": as}).Info("tftp listening (in its own process)")
	everReady := false
	deaths := 0 // in a row, of workers that lived less than restartWindow
	counts := &workerCounts{meter: w.Meter}
	for {
		started := time.Now()
		ready, err := w.runOnce(ctx, sock, l, counts)
		counts.ended()
		everReady = everReady || ready
		if ctx.Err() != nil {
			return nil
		}
		if l.cred != nil && !everReady && startRefused(err) {
			// It could not even start as its user: a sandbox that forbids changing user, an ACL, a
			// group that may not read a file. Only that falls back, and only before any worker
			// served as that user: after that a worker's death (at a hostile packet, say, or
			// killed by another process of that user) never buys the next one root.
			w.Server.log.WithError(err).Warn("tftp worker could not start as its user; running it as bootd's own")
			l.cred = nil
		}
		// Counted in a row, not within a window: waits that grow longer than a window would let
		// the count, and the wait, drop back to the start.
		if deaths++; time.Since(started) >= restartWindow {
			deaths = 1
		}
		if deaths > maxRestarts && !everReady {
			return fmt.Errorf("tftp worker died %d times in a row, each within %s of its start, last: %w", deaths, restartWindow, err)
		}
		wait := backoff(deaths)
		w.Server.log.WithError(err).Errorf("tftp worker died; starting it again in %s", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// startRefused reports whether err, from a worker that never got ready, says it cannot run as
// the user it was given: exec was refused, or it exited with exitRefused (a file it may not
// read). Nothing else does: not a signal, not another status (Go exits with 2 on a runtime
// failure or an unhandled signal, which another process of its user could send).
func startRefused(err error) bool {
	if errors.Is(err, fs.ErrPermission) {
		return true
	}
	var exit *exec.ExitError
	return errors.As(err, &exit) && exit.ExitCode() == exitRefused
}

// backoff is the wait before the next start after deaths short-lived workers in a row.
func backoff(deaths int) time.Duration {
	if deaths <= maxRestarts {
		return restartDelay
	}
	return restartDelay * time.Duration(min(1<<min(deaths-maxRestarts, 16), maxBackoff))
}

// runOnce starts one worker and returns when it exits, stopping it once ctx is done: it closes
// the worker's lifeline, then kills it if it is still there after stopWait. ready reports whether
// the worker got as far as serving.
func (w Worker) runOnce(ctx context.Context, sock *os.File, l *launch, counts *workerCounts) (ready bool, err error) {
	cmd, lifeline, logs, err := w.start(sock, l)
	if err != nil {
		return false, fmt.Errorf("start tftp worker: %w", err)
	}
	defer logs.Close()
	readyCh, relayed := make(chan struct{}), make(chan struct{})
	go func() {
		relayLog(logs, w.Server.log, reservedKeys(w.Server.log), func() { close(readyCh) }, counts.report, w.OnSent)
		close(relayed)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// gone reads the worker's last lines, for a second at most, and whether it got ready.
	gone := func(err error) (bool, error) {
		_ = logs.SetReadDeadline(time.Now().Add(time.Second))
		<-relayed
		select {
		case <-readyCh:
			return true, err
		default:
			return false, err
		}
	}
	select {
	case err := <-exited:
		return gone(exitError(err))
	case <-ctx.Done():
	}
	lifeline.Close()
	select {
	case <-exited:
	case <-time.After(stopWait):
		if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			w.Server.log.WithError(err).Error("tftp worker did not stop and cannot be killed; it ends when its transfers time out")
			return true, nil
		}
		<-exited
	}
	_, _ = gone(nil)
	return true, nil
}

// launch is how workers are started: as whom, and in which PID namespace.
type launch struct {
	cred  *syscall.Credential // nil: as bootd
	clone uintptr             // newPIDNamespace, or 0 once one could not be made
}

// newPIDNamespace is what the worker's clone asks for (a variable so tests can make it fail).
var newPIDNamespace uintptr = syscall.CLONE_NEWPID

// ownPIDNamespace gives a root bootd's worker a PID namespace of its own, in which it is process
// 1: whatever a compromised worker starts dies with it (the kernel kills the namespace's other
// processes when its first one ends), and it cannot signal processes outside. Making one takes
// root.
func ownPIDNamespace() uintptr {
	if os.Geteuid() != 0 {
		return 0
	}
	return newPIDNamespace
}

// start starts a worker as l says. A PID namespace that cannot be made (a container or a seccomp
// policy may forbid it) costs the namespace, not the worker: it is started again in bootd's, and
// l keeps it there from then on, with a warning. Only the errnos clone gives for a namespace it
// may not or cannot make lead there: a passing shortage (EAGAIN, ENOMEM) or an exec refusal
// (EACCES, ENOENT) does not cost the namespace. Start reports every failure before exec alike (a
// fork/exec error), so the errno decides; a setuid refused with EPERM costs one more start,
// which then fails too and leaves l as it was. When the second start fails, its error is returned.
func (w Worker) start(sock *os.File, l *launch) (*exec.Cmd, io.WriteCloser, *os.File, error) {
	cmd, lifeline, logs, err := w.startWith(sock, l.cred, l.clone)
	if err == nil || l.clone == 0 || !namespaceRefused(err) {
		return cmd, lifeline, logs, err
	}
	cmd, lifeline, logs, err2 := w.startWith(sock, l.cred, 0)
	if err2 != nil {
		return nil, nil, nil, err2
	}
	w.Server.log.WithError(err).Warn("tftp worker runs in bootd's PID namespace (it could not have one of its own): what a compromised worker starts could outlive it")
	l.clone = 0
	return cmd, lifeline, logs, nil
}

// namespaceRefused is clone's answer when a new PID namespace is forbidden (EPERM: no
// CAP_SYS_ADMIN in a container; EINVAL: unsupported) or the namespaces ran out (ENOSPC, EUSERS).
func namespaceRefused(err error) bool {
	for _, e := range []syscall.Errno{syscall.EPERM, syscall.EINVAL, syscall.ENOSPC, syscall.EUSERS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// startWith starts one worker process, on sock as its fd 3, and returns it with its lifeline
// (its stdin) and the read end of its log (its stderr).
func (w Worker) startWith(sock *os.File, cred *syscall.Credential, clone uintptr) (*exec.Cmd, io.WriteCloser, *os.File, error) {
	args := []string{WorkerCommand, "--ipxe-dir", w.Server.root, "--files", strings.Join(w.Server.files, ",")}
	if w.debug() {
		args = append(args, "--debug")
	}
	cmd := exec.Command(w.Exe, args...)
	cmd.ExtraFiles = []*os.File{sock} // becomes fd 3
	// The lifeline ends when bootd closes it or dies: unlike a signal, that needs no right to
	// signal a process of another user (CAP_KILL). Pdeathsig is the second line.
	lifeline, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	// Not child.Command: its context would kill the worker, which must stop through the
	// lifeline (and may run as another user); Pdeathsig is set here as it sets it there.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: cred, Cloneflags: clone}
	// A pipe of our own rather than StderrPipe, whose Wait would wait for the end of the log: a
	// process the worker left behind holding its stderr could hold us too.
	logs, logsW, err := os.Pipe()
	if err != nil {
		lifeline.Close()
		return nil, nil, nil, err
	}
	cmd.Stderr = logsW
	err = cmd.Start()
	logsW.Close() // the worker has its own copy
	if err != nil {
		logs.Close()
		return nil, nil, nil, err // Start closed the lifeline's pipe
	}
	return cmd, lifeline, logs, nil
}

func exitError(err error) error {
	if err == nil {
		return errors.New("exited without being asked to")
	}
	return err
}

// debug reports whether bootd's log (the Server's) shows debug entries, so the worker only sends what will be shown.
func (w Worker) debug() bool {
	switch l := w.Server.log.(type) {
	case *logrus.Entry:
		return l.Logger.IsLevelEnabled(logrus.DebugLevel)
	case *logrus.Logger:
		return l.IsLevelEnabled(logrus.DebugLevel)
	}
	return true
}

// reservedKeys are the fields bootd sets on its log (listener=tftp): a worker's entry cannot replace
// them, so it cannot pass for another part of bootd.
func reservedKeys(log logrus.FieldLogger) []string {
	e, ok := log.(*logrus.Entry)
	if !ok {
		return nil
	}
	keys := make([]string, 0, len(e.Data))
	for k := range e.Data {
		keys = append(keys, k)
	}
	return keys
}

// workerUser is the system user the worker runs as when the host has it (dist/bootd.sysusers
// creates it): a user of its own, which no other process shares. Without it, nobody.
const workerUser = "bootd-tftp"

// workerUsers are tried in order (a variable for tests).
var workerUsers = []string{workerUser, "nobody"}

// credential is whom the worker runs as: an unprivileged user (see workerUsers), when bootd runs
// as root and anyone may run the binary and read the iPXE files, so a flaw in the handling of TFTP
// packets (which anyone on the segment may send) yields that user's rights, not root's. The
// worker needs no more: it inherits its bound socket, and its transfers reply from unprivileged
// ports. Otherwise it runs as bootd does, and the second value says why.
func (w Worker) credential() (*syscall.Credential, string) {
	if os.Geteuid() != 0 {
		return nil, "bootd's own"
	}
	if blocker := notForOthers(w.Exe, 0o001); blocker != "" {
		return nil, "root: other users may not run " + blocker + ", so the worker's user could not start it"
	}
	if blocker := w.Server.unreadableByOthers(); blocker != "" {
		return nil, "root: " + blocker + " is not readable by other users, so the worker's user could not serve it"
	}
	for _, name := range workerUsers {
		if cred, ok := lookupCredential(name); ok {
			return cred, name
		}
	}
	// No nobody in the user database (a minimal container): its customary number.
	return &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}, "nobody"
}

// lookupCredential is user name's uid and primary gid, with no supplementary groups.
func lookupCredential(name string) (*syscall.Credential, bool) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, false
	}
	uid, uerr := strconv.ParseUint(u.Uid, 10, 32)
	gid, gerr := strconv.ParseUint(u.Gid, 10, 32)
	if uerr != nil || gerr != nil {
		return nil, false
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, true
}

// unreadableByOthers names the first file or directory that users other than its owner may not
// read or search on the way to one of s's files, by the path as given (the worker walks root) and
// as resolved (links may lead out of root), or returns "".
func (s *Server) unreadableByOthers() string {
	if blocker := notForOthers(s.root, 0o001); blocker != "" {
		return blocker
	}
	for _, name := range s.files {
		f, _, err := open(s.root, name)
		if err != nil {
			return filepath.Join(s.root, name) // gone since New: the worker will say why
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
// execute or search) on it, or the first directory above it they may not search; else "".
func notForOthers(path string, want fs.FileMode) string {
	path, err := filepath.Abs(path)
	if err != nil {
		return path
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm()&want == 0 {
		return path
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm()&0o001 == 0 {
			return dir
		}
		if dir == "/" {
			return ""
		}
	}
}
