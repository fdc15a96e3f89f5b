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
	"strings"
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
	// Overlay returns the files of the node asking, secrets included: sealed to its TPM when it
	// has one on record. tpm holds the TPM keys the request presents, nil when it has none.
	Overlay(from netip.AddrPort, tpm *TPMKeys) (Overlay, error)
	// Hello records that the node asking is up, and returns what it boots. token is the node
	// token the request shows ("" for none): a node with a TPM must show the one its sealed
	// overlay carried.
	Hello(from netip.AddrPort, token string) (Target, error)
	// ReportHardware records the hardware report (JSON) of the node asking; token as for Hello.
	// changed says that it differs from what bootd held, so the node's files (gres) are
	// rendered differently now.
	ReportHardware(from netip.AddrPort, token string, report []byte) (node string, changed bool, err error)
	// Kickstart returns the disk-install kickstart of the node at address from (it holds no
	// secret: the installed node fetches its overlay at first boot, like a netbooted one), to
	// stream and close: a layer's large file is in it.
	Kickstart(from netip.Addr) (node string, ks io.ReadCloser, err error)
	// Power carries out the request (JSON: an action and a host list) of the node asking for
	// other nodes' power: the master's, for Slurm's power saving. The reply is one line per node.
	// token as for Hello.
	Power(ctx context.Context, from netip.AddrPort, token string, request []byte) (node string, reply []byte, err error)
}

// TPMKeys are the public halves of a node's TPM keys, TPM2B_PUBLIC as tpm2-tools writes them
// (-u): its endorsement key, and an attestation key it made under it for this request.
type TPMKeys struct{ EK, AK []byte }

// Overlay is what a node receives: its files, or the same files sealed to its TPM.
type Overlay struct {
	Node  string
	Files []OverlayFile
	// Sealed, when set, is sent instead of Files.
	Sealed *Sealed
}

// Sealed is an overlay only one TPM can open: Credential (tpm2_makecredential's file) carries a
// secret that only the TPM holding the node's endorsement key recovers (tpm2_activatecredential),
// and Payload is the overlay's tar.gz encrypted with that secret (openssl enc's format).
type Sealed struct {
	Credential, Payload []byte
	EK                  string // the endorsement key's fingerprint, for the log
}

// The names in the tar a sealed overlay travels in (the node's script looks for these).
const (
	SealedCredential = "credential"
	SealedPayload    = "overlay.tar.gz.enc"
)

// maxReport bounds a hardware report: a slurmd -C line and a few GPU names.
const maxReport = 64 << 10

// overlay sends the asking node its files as a gzip tar with modes and numeric owners, for
// `tar -xzpf - -C /` (or --numeric-owner) early at boot; a node with a TPM asks by POST with its
// TPM keys and gets them sealed (a plain tar of the credential and the encrypted tar.gz).
// Nothing of it is logged but names.
func (s *Server) overlay(w http.ResponseWriter, r *http.Request) {
	from, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		http.Error(w, "bad remote address", http.StatusBadRequest)
		return
	}
	var keys *TPMKeys
	if r.Method == http.MethodPost {
		if keys, err = readTPMKeys(w, r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	o, err := s.nodes.Overlay(netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), keys)
	if err != nil {
		s.refuse(w, r, err, "overlay")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	fields := logrus.Fields{"node": o.Node, "files": len(o.Files), "remote": r.RemoteAddr}
	if o.Sealed != nil {
		w.Header().Set("Content-Type", "application/x-tar")
		err = writeSealed(w, o.Sealed)
		fields["sealed_to_ek"] = o.Sealed.EK
	} else {
		w.Header().Set("Content-Type", "application/gzip")
		err = WriteTarGz(w, o.Files)
		fields["identity"] = "mac+address"
	}
	if err != nil {
		s.log.WithError(err).WithField("node", o.Node).Warn("overlay not sent")
		return
	}
	s.log.WithFields(fields).Info("sent node overlay")
}

// maxTPMKeys bounds the body of a sealed overlay request: two TPM2B_PUBLICs of a few hundred
// bytes and the multipart framing.
const maxTPMKeys = 16 << 10

// readTPMKeys reads the multipart form bootd-node posts (curl -F ek=@ek.pub -F ak=@ak.pub).
func readTPMKeys(w http.ResponseWriter, r *http.Request) (*TPMKeys, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxTPMKeys)
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, fmt.Errorf("want a multipart form with the TPM keys ek and ak: %w", err)
	}
	var k TPMKeys
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("TPM keys: %w", err)
		}
		var dst *[]byte
		switch p.FormName() {
		case "ek":
			dst = &k.EK
		case "ak":
			dst = &k.AK
		default:
			return nil, fmt.Errorf("TPM keys: unknown field %q (want ek and ak)", p.FormName())
		}
		if *dst != nil {
			return nil, fmt.Errorf("TPM keys: %s given twice", p.FormName())
		}
		if *dst, err = io.ReadAll(p); err != nil {
			return nil, fmt.Errorf("TPM keys: %w", err)
		}
	}
	if len(k.EK) == 0 || len(k.AK) == 0 {
		return nil, errors.New("TPM keys: want both ek and ak")
	}
	return &k, nil
}

// writeSealed writes a sealed overlay as a plain tar of its two files.
func writeSealed(w io.Writer, sealed *Sealed) error {
	tw := tar.NewWriter(w)
	for _, f := range []struct {
		name string
		data []byte
	}{{SealedCredential, sealed.Credential}, {SealedPayload, sealed.Payload}} {
		h := &tar.Header{Name: f.name, Mode: 0o600, Size: int64(len(f.data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// nodeToken is the token a request shows (Authorization: Bearer), "" for none.
func nodeToken(r *http.Request) string {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(token)
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
	node, changed, err := s.nodes.ReportHardware(netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), nodeToken(r), body)
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
	node, reply, err := s.nodes.Power(r.Context(), netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), nodeToken(r), body)
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
