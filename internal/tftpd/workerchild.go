package tftpd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/labcluster/gpucluster/internal/cli"
)

// RunWorker is the worker's side, `bootd tftp-worker --ipxe-dir D --files F,... [--debug]`: it
// serves D on the socket inherited as fd 3 until its stdin ends (bootd closed it, or died), and
// logs JSON lines to stderr for bootd to relay. It fails before serving when it cannot open one
// of the files bootd found (it may run as another user): with status exitRefused when it may not
// (a permission error). SIGTERM and SIGINT are ignored: they reach the whole service at once, and
// bootd stops its worker itself.
func RunWorker(args []string) error {
	flags := cli.NewFlagSet(WorkerCommand, "Usage: bootd "+WorkerCommand+` --ipxe-dir D --files F,... [--debug]

Internal: bootd serve runs this as its TFTP process, on a socket it passes as fd 3;
it stops when its standard input ends.
`)
	root := flags.String("ipxe-dir", "", "directory with the iPXE binaries")
	files := flags.String("files", "", "comma-separated names the worker must be able to serve")
	debug := flags.Bool("debug", false, "log each transfer's protocol details")
	if err := flags.Parse(args); err != nil {
		return err
	}
	signal.Ignore(syscall.SIGTERM, os.Interrupt)
	if err := confine(); err != nil {
		return err
	}
	log := logrus.New() // to stderr, bootd's relay
	log.SetFormatter(&logrus.JSONFormatter{})
	if *debug {
		log.SetLevel(logrus.DebugLevel)
	}
	for _, name := range strings.Split(*files, ",") {
		f, _, err := open(*root, name)
		if errors.Is(err, fs.ErrPermission) {
			return &refusedError{fmt.Errorf("tftp worker may not serve %s as this user: %w", name, err)}
		}
		if err != nil {
			return fmt.Errorf("tftp worker cannot serve %s: %w", name, err)
		}
		f.Close()
	}
	conn, err := inheritedConn()
	if err != nil {
		return err
	}
	ctx := untilStdinEnds(context.Background())
	log.WithField(readyField, true).Info("tftp worker ready")
	return newService(*root, log).serve(ctx, conn)
}

func inheritedConn() (*net.UDPConn, error) {
	sock := os.NewFile(inheritedFD, "tftp socket")
	pc, err := net.FilePacketConn(sock)
	sock.Close()
	if err != nil {
		return nil, fmt.Errorf("fd %d is not the tftp socket: %w", inheritedFD, err)
	}
	conn, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return nil, fmt.Errorf("fd %d is not a UDP socket", inheritedFD)
	}
	return conn, nil
}

// untilStdinEnds is ctx, also ended when stdin reaches its end: the parent's lifeline.
func untilStdinEnds(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		_, _ = io.Copy(io.Discard, os.Stdin)
	}()
	return ctx
}

// confine keeps other processes of the worker's user (nobody is shared) from tracing it or
// reading its memory and environment (not dumpable: its /proc files then belong to root), and
// the worker and anything it might run from gaining privileges (no_new_privs: setuid binaries do
// not raise it). bootd's systemd unit sets the second for the whole service already.
func confine() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("tftp worker: make it not dumpable: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("tftp worker: set no_new_privs: %w", err)
	}
	return nil
}

// exitRefused is the worker's exit status when it may not do its work as the user it runs as
// (a file it may not open): only that, or exec refusing to start it, makes bootd run the next
// worker as its own user (startRefused). Any other early exit is a failure to report.
const exitRefused = 3

// refusedError is RunWorker's error for a refusal (ExitStatus: exitRefused).
type refusedError struct{ Err error }

func (e *refusedError) Error() string { return e.Err.Error() }
func (e *refusedError) Unwrap() error { return e.Err }

// ExitStatus is the status bootd exits with after a command's error: exitRefused for the
// worker's refusal, 1 for anything else (not the status of some program the error wraps).
func ExitStatus(err error) int {
	var refused *refusedError
	if errors.As(err, &refused) {
		return exitRefused
	}
	return 1
}
