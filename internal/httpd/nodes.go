package httpd

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/netip"
	"time"

	"github.com/sirupsen/logrus"
)

// OverlayFile is one file of a node's overlay.
type OverlayFile struct {
	Path     string
	Mode     fs.FileMode
	UID, GID int
	Data     []byte
}

// Nodes is what the endpoints for booted nodes need. from is the request's source address and
// port: the implementation decides whether they identify a node well enough for what is asked.
type Nodes interface {
	// Overlay returns the files of the node asking, secrets included.
	Overlay(from netip.AddrPort) (node string, files []OverlayFile, err error)
	// ReportHardware records the hardware report (JSON) of the node asking; changed says that it
	// differs from what bootd held, so the node's files (gres) are rendered differently now.
	ReportHardware(from netip.AddrPort, report []byte) (node string, changed bool, err error)
	// Kickstart returns the disk-install kickstart of the node at address from (it holds no
	// secret: the installed node fetches its overlay at first boot, like a netbooted one), to
	// stream and close: a layer's large file is in it.
	Kickstart(from netip.Addr) (node string, ks io.ReadCloser, err error)
	// Power carries out the request (JSON: an action and a host list) of the node asking for
	// other nodes' power: the master's, for Slurm's power saving. The reply is one line per node.
	Power(ctx context.Context, from netip.AddrPort, request []byte) (node string, reply []byte, err error)
}

// maxReport bounds a hardware report: a slurmd -C line and a few GPU names.
const maxReport = 64 << 10

// overlay sends the asking node its files as a gzip tar with modes and numeric owners, for
// `tar -xzpf - -C /` (or --numeric-owner) early at boot. Nothing of it is logged but names.
func (s *Server) overlay(w http.ResponseWriter, r *http.Request) {
	from, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		http.Error(w, "bad remote address", http.StatusBadRequest)
		return
	}
	node, files, err := s.nodes.Overlay(netip.AddrPortFrom(from.Addr().Unmap(), from.Port()))
	if err != nil {
		s.refuse(w, r, err, "overlay")
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Cache-Control", "no-store")
	if err := WriteTarGz(w, files); err != nil {
		s.log.WithError(err).WithField("node", node).Warn("overlay not sent")
		return
	}
	s.log.WithFields(logrus.Fields{"node": node, "files": len(files), "remote": r.RemoteAddr}).Info("sent node overlay")
}

func (s *Server) hardware(w http.ResponseWriter, r *http.Request) {
	from, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		http.Error(w, "bad remote address", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReport))
	if err != nil {
		http.Error(w, "report too large", http.StatusRequestEntityTooLarge)
		return
	}
	node, changed, err := s.nodes.ReportHardware(netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), body)
	if err != nil {
		s.refuse(w, r, err, "hardware report")
		return
	}
	s.log.WithFields(logrus.Fields{"node": node, "remote": r.RemoteAddr, "changed": changed}).Info("node reported its hardware")
	// "changed": the node fetches its overlay again before slurmd starts (bootd-node report), so
	// a new node's first boot registers its GPUs.
	if changed {
		fmt.Fprintln(w, "changed")
		return
	}
	fmt.Fprintln(w, "ok")
}

// maxPowerRequest bounds a power request: an action and a host list.
const maxPowerRequest = 16 << 10

// power carries out a node's power request; bootd acts on BMCs for as long as they take, so
// the request has no deadline but the daemon's per-node timeouts.
func (s *Server) power(w http.ResponseWriter, r *http.Request) {
	from, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		http.Error(w, "bad remote address", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPowerRequest))
	if err != nil {
		http.Error(w, "request too large", http.StatusRequestEntityTooLarge)
		return
	}
	node, reply, err := s.nodes.Power(r.Context(), netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), body)
	if err != nil {
		s.refuse(w, r, err, "power request")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(reply)
	s.log.WithFields(logrus.Fields{"node": node, "remote": r.RemoteAddr}).Info("answered a node's power request")
}

func (s *Server) kickstart(w http.ResponseWriter, r *http.Request) {
	from, err := remoteAddr(r)
	if err != nil {
		http.Error(w, "bad remote address", http.StatusBadRequest)
		return
	}
	node, ks, err := s.nodes.Kickstart(from)
	if err != nil {
		s.refuse(w, r, err, "kickstart")
		return
	}
	defer ks.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if _, err := io.Copy(w, ks); err != nil {
		s.log.WithError(err).WithFields(logrus.Fields{"node": node, "remote": r.RemoteAddr}).Warn("kickstart not sent whole")
		return
	}
	s.log.WithFields(logrus.Fields{"node": node, "remote": r.RemoteAddr}).Info("sent kickstart")
}

func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err error, what string) {
	if reason := refusal(err); reason != "" {
		s.opts.Meter.NodeRequestRefused(what, reason)
	}
	switch {
	case errors.Is(err, ErrForbidden):
		s.remote.Log(s.log.WithError(err).WithField("remote", r.RemoteAddr), logrus.WarnLevel, what+" refused")
		http.Error(w, "forbidden", http.StatusForbidden)
	case errors.Is(err, ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case errors.Is(err, ErrNotFound):
		s.remote.Log(s.log.WithError(err).WithField("remote", r.RemoteAddr), logrus.WarnLevel, what+": not found")
		http.Error(w, err.Error(), http.StatusNotFound)
	default:
		s.log.WithError(err).WithField("remote", r.RemoteAddr).Error(what + " failed")
		http.Error(w, "internal error", http.StatusInternalServerError)
	}
}

// refusal is the Meter's reason for a refusal, or "" for a failure of bootd's own.
func refusal(err error) string {
	switch {
	case errors.Is(err, ErrForbidden):
		return "forbidden"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	}
	return ""
}

// ErrInvalid is what Nodes wraps for a request that is malformed.
var ErrInvalid = errors.New("invalid")

// WriteTarGz writes files as an overlay's tar.gz, in the order given, with fixed times: the same
// overlay gives the same bytes. Exported for the tests of what unpacks it (bootd-node, layers/).
func WriteTarGz(w io.Writer, files []OverlayFile) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		h := &tar.Header{Name: "." + f.Path, Mode: int64(f.Mode.Perm()), Uid: f.UID, Gid: f.GID,
			Size: int64(len(f.Data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}
