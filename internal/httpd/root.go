package httpd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"

	"github.com/sirupsen/logrus"
)

// RootReport is what a node says about its root image once it holds it checked
// (POST /api/v1/node/root, from bootd-fetch): where its bytes came from and where it lives.
type RootReport struct {
	// Source: "chunks" (rebuilt from chunks), "whole" (the whole file, the fallback) or "cache"
	// (the node's cache disk held it).
	Source string `json:"source"`
	// Storage: "ram" (the root is kept in RAM) or "disk" (mounted from the node's cache disk).
	Storage      string  `json:"storage"`
	Size         int64   `json:"size"`
	FromBootd    int64   `json:"from_bootd"`
	FromPeers    int64   `json:"from_peers"`
	FromSeeds    int64   `json:"from_seeds"`
	PeersDropped int     `json:"peers_dropped"`
	Seconds      float64 `json:"seconds"`
}

// Check refuses a report that says nothing bootd can show.
func (r RootReport) Check() error {
	switch {
	case r.Source != "chunks" && r.Source != "whole" && r.Source != "cache":
		return fmt.Errorf("source %q: want chunks, whole or cache", r.Source)
	case r.Storage != "ram" && r.Storage != "disk":
		return fmt.Errorf("storage %q: want ram or disk", r.Storage)
	case r.Size < 0 || r.FromBootd < 0 || r.FromPeers < 0 || r.FromSeeds < 0 || r.PeersDropped < 0 || r.Seconds < 0:
		return fmt.Errorf("negative figures")
	}
	return nil
}

// Roots records the nodes' root reports.
type Roots interface {
	// Root records the report of the node at address from; an error wrapping ErrNotFound refuses
	// an address that is no node's.
	Root(from netip.Addr, r RootReport) (node string, err error)
}

// maxRootReport bounds the report's body: a few numbers.
const maxRootReport = 4 << 10

func (s *Server) rootReport(w http.ResponseWriter, r *http.Request) {
	from, err := remoteAddr(r)
	if err != nil {
		http.Error(w, "bad remote address", http.StatusBadRequest)
		return
	}
	var rep RootReport
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRootReport))
	if err == nil {
		err = json.Unmarshal(body, &rep)
	}
	if err == nil {
		err = rep.Check()
	}
	if err != nil {
		http.Error(w, "bad root report: "+err.Error(), http.StatusBadRequest)
		return
	}
	node, err := s.roots.Root(from, rep)
	if err != nil {
		s.remote.Log(s.log.WithError(err).WithField("remote", r.RemoteAddr), logrus.WarnLevel, "refused a root report")
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	s.log.WithFields(logrus.Fields{"node": node, "source": rep.Source, "storage": rep.Storage, "bytes": rep.Size,
		"from_bootd": rep.FromBootd, "from_peers": rep.FromPeers, "from_seeds": rep.FromSeeds}).Info("node holds its root")
	w.WriteHeader(http.StatusNoContent)
}
