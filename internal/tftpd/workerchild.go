package tftpd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"
)

// RunWorker is the worker's side, `bootd tftp-worker --ipxe-dir D [--debug]`: it serves D on the
// socket inherited as fd 3 until its stdin ends (the parent closed it, or died) or SIGTERM, and
// logs JSON lines to stderr for the parent to relay.
func RunWorker(args []string) error {
	flags := flag.NewFlagSet(WorkerCommand, flag.ContinueOnError)
	flags.Usage = func() {
		fmt.Fprintf(flags.Output(), "Usage: bootd %s --ipxe-dir D [--debug]\n\nInternal: bootd serve runs this as its TFTP process, on a socket it passes as fd 3;\nit stops when its standard input ends.\n", WorkerCommand)
	}
	root := flags.String("ipxe-dir", "", "directory with the iPXE binaries")
	debug := flags.Bool("debug", false, "log each transfer's protocol details")
	if err := flags.Parse(args); err != nil {
		return err
	}
	log := logrus.New()
	log.SetOutput(os.Stderr)
	log.SetFormatter(&logrus.JSONFormatter{})
	if *debug {
		log.SetLevel(logrus.DebugLevel)
	}
	// The parent checked the directory and logged what it holds: say it again only on failure.
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	if _, err := servable(*root, quiet); err != nil {
		_, _ = servable(*root, log)
		return err
	}
	conn, err := inheritedConn()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx = untilStdinEnds(ctx)
	log.WithField(readyField, true).Info("tftp worker ready")
	return (&Server{root: *root, log: log}).serveConn(ctx, conn, false)
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
