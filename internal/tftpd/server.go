package tftpd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/pin/tftp/v3"
	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/logfield"
	"github.com/labcluster/gpucluster/internal/ratelog"
)

const (
	// maxBlockSize caps the negotiated blksize at a 1500-byte Ethernet MTU
	// minus IP (20), UDP (8) and TFTP (4) headers. pin/tftp already clamps
	// to the MTU of the interface a request arrived on, but with jumbo
	// frames on the server side a larger block would be fragmented or
	// dropped on the way to a PXE ROM, and ROMs handle fragments badly.
	maxBlockSize = 1468

	// timeout and retries bound how long a vanished client holds a transfer,
	// and so how long shutdown waits for it (about 5 x (3s + backoff)).
	// A ROM on the same switch answers in milliseconds.
	timeout = 3 * time.Second
	retries = 5
)

// errNotFound is all a refused client is told; the reason goes to the log
// only, so the client learns nothing about the server's files.
var errNotFound = errors.New("file not found")

// Server serves the Allowed files from one directory. bootd's process keeps it to check the
// directory once and for UEFI HTTP boot (Open); the TFTP socket itself is served by a Worker.
type Server struct {
	root  string
	files []string // the Allowed files root holds, found by New
	log   logrus.FieldLogger
}

// New returns a Server for root, the iPXE directory. It fails if root holds
// none of the Allowed files, since bootd could then boot nothing.
func New(root string, log logrus.FieldLogger) (*Server, error) {
	found, err := servable(root, log)
	if err != nil {
		return nil, err
	}
	log.WithFields(logrus.Fields{"dir": root, "files": strings.Join(found, ",")}).Info("tftp files available")
	return &Server{root: root, files: found, log: log}, nil
}

// servable lists the Allowed files root holds, warning about any present but refused.
func servable(root string, log logrus.FieldLogger) ([]string, error) {
	var found []string
	for _, name := range Allowed {
		f, _, err := open(root, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			// Present but refused (a link outside root, a directory): say so.
			log.WithError(err).WithField("file", name).Warn("tftp file not served")
			continue
		}
		f.Close()
		found = append(found, name)
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("tftp: %s holds none of %s", root, strings.Join(Allowed, ", "))
	}
	return found, nil
}

// serve serves conn until ctx is done, then waits for running transfers to end, writes the
// counts of the lines its rate limit held back, and returns nil. It closes conn.
func (s *service) serve(ctx context.Context, conn *net.UDPConn) error {
	// Deferred, so it runs once Shutdown has waited for the transfers; in a worker, before it
	// exits, so bootd relays the counts.
	defer s.remote.Flush()
	defer s.sendCounts(true)          // after the transfers: the last counts, which bootd keeps
	ts := tftp.NewServer(s.read, nil) // nil write handler: read-only
	ts.SetTimeout(timeout)
	ts.SetRetries(retries)
	ts.SetBlockSize(maxBlockSize)
	// plainConn (below) keeps pin/tftp from its per-request interface lookup; without that
	// lookup pin/tftp would cap blocks at 512 bytes unless its MTU clamp is off. maxBlockSize
	// still caps them, and it fits a 1500-byte link.
	ts.SetBlockSizeNegotiation(false)
	ts.SetHook(hook{s.log})

	reporting, stopReports := context.WithCancel(context.Background())
	defer stopReports()
	go s.reportCounts(reporting)
	done := make(chan error, 1)
	go func() { done <- ts.Serve(plainConn{conn, s.full}) }()
	select {
	case <-ctx.Done():
		ts.Shutdown() // waits for running transfers
		<-done
		conn.Close() // Shutdown closes it only once Serve has taken it, which a quick cancel beats
		return nil
	case err := <-done:
		// pin/tftp (v3.2.0) fails only before its first read, with no transfer to wait for, and
		// hands read errors to the hook; Shutdown still waits for any, so that none logs after
		// the Flush, should a later version fail later.
		ts.Shutdown()
		conn.Close()
		return fmt.Errorf("tftp serve: %w", err)
	}
}

// plainConn hides the *net.UDPConn from pin/tftp, which would otherwise ask for each packet's
// destination and interface (IP_PKTINFO) only to look the interface up by index, a netlink dump of
// every link, per request, in its one receive loop: with a bridge holding a port per PC that
// serialised a storm's requests (docs/benchmarks-log.md, item 3).
// Without them a transfer's socket is bound to the wildcard address, and the kernel picks the
// source address as it routes the reply; bootd serves one subnet on one interface, so that is the
// address the request came to (bootd checks it at start: checkReplySource).
//
// It also drops, unanswered, a read request past the transfer bounds (slots.go), before pin/tftp
// opens a socket and starts a goroutine for it: the client's ROM asks again a moment later,
// where an error would end its boot.
type plainConn struct {
	net.PacketConn
	full func(net.Addr) bool
}

func (c plainConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, from, err := c.PacketConn.ReadFrom(p)
		if err != nil || !isReadRequest(p[:n]) || !c.full(from) {
			return n, from, err
		}
	}
}

// isReadRequest reports whether a packet is a TFTP read request (RRQ, opcode 1).
func isReadRequest(p []byte) bool { return len(p) >= 2 && p[0] == 0 && p[1] == 1 }

// service is one socket being served (in the TFTP worker): the iPXE directory, and the bounds and
// the log limit of the transfers it runs. (bootd's own Server, kept for Open, serves no socket.)
type service struct {
	root      string
	log       logrus.FieldLogger
	transfers *slots
	bounds    *logrus.Entry // the log, with the bounds: the lines of a request past them
	// remote rate-limits the lines any client can trigger at will (refusals, failed transfers).
	remote *ratelog.Limiter
	// counted tallies every request's outcome, for bootd's metrics (counts.go).
	counted *tally
}

func newService(root string, log logrus.FieldLogger) *service {
	t := newSlots()
	return &service{root: root, log: log, transfers: t, remote: ratelog.New(ratelog.Every), counted: &tally{},
		bounds: log.WithFields(logrus.Fields{"max_transfers": t.maxTotal, "max_per_client": t.maxPer})}
}

// full reports whether a read request from client would pass a transfer bound, and logs it then.
func (s *service) full(client net.Addr) bool {
	ua, ok := client.(*net.UDPAddr)
	if !ok {
		return false
	}
	ap := unmapped(*ua)
	if !s.transfers.full(ap.Addr()) {
		return false
	}
	s.counted.add(OutcomeBusy, NoFile, 0, 0)
	s.remote.Log(s.bounds.WithField("client", ap.String()), logrus.WarnLevel,
		"tftp request dropped: too many transfers at once (the client asks again)")
	return true
}

// read is pin/tftp's read handler: one call per RRQ.
func (s *service) read(path string, rf io.ReaderFrom) error {
	start := time.Now()
	ot, ok := rf.(tftp.OutgoingTransfer)
	if !ok { // pin/tftp's sender always is one
		return fmt.Errorf("tftp: pin/tftp handed %T, not an outgoing transfer", rf)
	}
	client := unmapped(ot.RemoteAddr())
	log := s.log.WithField("client", client.String())
	if !s.transfers.take(client.Addr()) {
		// Only a request that got past plainConn's check in a race with another: rare.
		s.counted.add(OutcomeBusy, NoFile, 0, 0)
		s.remote.Log(s.bounds.WithField("client", client.String()), logrus.WarnLevel,
			"tftp request refused: too many transfers at once")
		return errBusy
	}
	defer s.transfers.release(client.Addr())
	name, err := CleanPath(path)
	if err != nil {
		s.counted.add(OutcomeRefused, NoFile, 0, 0)
		s.remote.Log(log.WithField("path", path), logrus.InfoLevel, "tftp request refused: not an iPXE binary")
		return errNotFound
	}
	f, size, err := open(s.root, name)
	if err != nil {
		s.counted.add(OutcomeRefused, name, 0, 0) // CleanPath let only an Allowed name through
		s.remote.Log(log.WithField("file", name).WithError(err), logrus.WarnLevel, "tftp request refused")
		return errNotFound
	}
	defer f.Close()
	// Answer the tsize option with the real size: UEFI firmware probes it
	// before downloading. Setting it explicitly avoids relying on Seek.
	ot.SetSize(size)
	n, err := rf.ReadFrom(deadlineReader{f, start.Add(maxTransferTime)})
	s.logTransfer(log.WithField("file", name), name, n, time.Since(start), err)
	return err
}

func (s *service) logTransfer(log logrus.FieldLogger, file string, n int64, d time.Duration, err error) {
	log = log.WithFields(logrus.Fields{"bytes": n, "duration": logfield.Duration(d)})
	switch {
	case err == nil:
		s.counted.add(OutcomeDone, file, n, d)
		log.Info(transferDone)
	case isTSizeProbe(err):
		s.counted.add(OutcomeProbe, file, n, d)
		log.Debug("tftp tsize probe: client aborted after the option ack, as UEFI firmware does")
	default:
		s.counted.add(OutcomeFailed, file, n, d)
		// A client that stops answering ends so: anyone can make that happen at will.
		s.remote.Log(log.WithError(err), logrus.WarnLevel, "tftp transfer failed")
	}
}

// transferDone is the log message of a finished transfer: the worker's relay (Worker.OnSent)
// recognises it by this text.
const transferDone = "tftp transfer done"

// isTSizeProbe recognises a client that sent error 8 (option negotiation
// refused, RFC 2347) in answer to our OACK, before any data: UEFI firmware
// asks with tsize=0, aborts so, and asks again. pin/tftp reports it only as
// text, "sending block 0: code=8, ...".
func isTSizeProbe(err error) bool {
	return strings.HasPrefix(err.Error(), "sending block 0: code=8,")
}

// unmapped is a's address and port, an IPv4 address as 1.2.3.4 however net stored it: the key
// of the per-client bound, the same for a request and its transfer.
func unmapped(a net.UDPAddr) netip.AddrPort {
	ap := a.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// hook receives pin/tftp's transfer statistics. The read handler already
// logs each transfer at info (it knows the byte count, the stats do not), so
// the hook adds protocol detail at debug, and catches failures the handler
// never sees: malformed packets and write requests.
type hook struct{ log logrus.FieldLogger }

func (h hook) OnSuccess(st tftp.TransferStats) {
	h.fields(st).Debug("tftp transfer stats")
}

func (h hook) OnFailure(st tftp.TransferStats, err error) {
	h.fields(st).WithError(err).Debug("tftp transfer stats: failed")
}

func (h hook) fields(st tftp.TransferStats) logrus.FieldLogger {
	return h.log.WithFields(logrus.Fields{
		"client":   st.RemoteAddr.String(),
		"path":     st.Filename,
		"blksize":  st.Opts["blksize"],
		"tsize":    st.Opts["tsize"],
		"sent":     st.DatagramsSent,
		"acked":    st.DatagramsAcked,
		"duration": logfield.Duration(st.Duration),
	})
}
