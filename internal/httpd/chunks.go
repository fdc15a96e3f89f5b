package httpd

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// serveChunk sends a chunk without a log line of its own: a root image is tens of thousands of
// chunks, each node's fetch is logged by the node (and bootd logs the index it was served).
func (s *Server) serveChunk(w http.ResponseWriter, r *http.Request, prefix, name string) {
	if !plainNames(prefix, name) {
		http.NotFound(w, r)
		return
	}
	f, err := s.files.OpenChunk(prefix, name)
	if err != nil {
		s.notFound(w, r, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, "stat failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(withProgressDeadline(w), r, name, st.ModTime(), f)
}

// announcePeer records that the node asking serves the chunks of an index on a port:
// POST /api/v1/node/peer?index=<sha256>&port=<n>. Only a node's static address is accepted.
func (s *Server) announcePeer(w http.ResponseWriter, r *http.Request) {
	from, err := remoteAddr(r)
	if err != nil {
		http.Error(w, "bad remote address", http.StatusBadRequest)
		return
	}
	index := r.URL.Query().Get("index")
	port, err := strconv.ParseUint(r.URL.Query().Get("port"), 10, 16)
	if !sha256hex.Valid(index) || err != nil || port == 0 {
		http.Error(w, "want index=<sha256 of the index>&port=<1-65535>", http.StatusBadRequest)
		return
	}
	node, err := s.peers.Announce(from, index, uint16(port))
	if err != nil {
		s.remote.Log(s.log.WithError(err).WithField("remote", r.RemoteAddr), logrus.WarnLevel, "refused a peer announcement")
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	s.log.WithFields(logrus.Fields{"node": node, "port": port}).Debug("node serves chunks")
	w.WriteHeader(http.StatusNoContent)
}

// PeersReply is GET /api/v1/peers?index=<sha256>: other nodes' chunk stores holding (or
// fetching) that index's chunks, in the order to try them.
type PeersReply struct {
	Peers []string `json:"peers"`
}

func (s *Server) listPeers(w http.ResponseWriter, r *http.Request) {
	from, err := remoteAddr(r)
	if err != nil {
		http.Error(w, "bad remote address", http.StatusBadRequest)
		return
	}
	index := r.URL.Query().Get("index")
	if !sha256hex.Valid(index) {
		http.Error(w, "want index=<sha256 of the index>", http.StatusBadRequest)
		return
	}
	reply := PeersReply{Peers: s.peers.List(index, from)}
	if reply.Peers == nil {
		reply.Peers = []string{}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(reply)
}
