package httpd

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/ratelog"
)

// Facts are what iPXE reports about a machine in its script URL.
type Facts struct {
	UUID, Manufacturer, Product, Serial, Arch, Platform string
}

// Target is what an assigned machine boots: its name and address, and its role's image.
type Target struct {
	Name, Role string
	Address    netip.Addr
	MAC        net.HardwareAddr
	Image      string // image name, e.g. compute
	Version    string
	Kernel     string   // file name in the version directory
	Initrds    []string // file names, load order
	Cmdline    string   // the image's extra kernel arguments
	// Rootfs is the image's root file system (a squashfs file name), "" for kernel+initrd
	// images; RootfsSHA256 is its hash from the verified manifest.
	Rootfs, RootfsSHA256 string
	// WritableArgs place a live root's writable layer (bootd's [writable] and [disks]:
	// rd.bootd.ram=, rd.bootd.disk=), for the base layer's bootd-disk dracut module.
	WritableArgs []string
	// RootfsIndex is the casync index of the root's chunks ("" when the version has none), and
	// RootfsIndexSHA256 its hash from the verified manifest: the node's trust root for chunks.
	RootfsIndex, RootfsIndexSHA256 string
}

// Machines is what the listener needs from the inventory.
type Machines interface {
	// Boot records that mac, asking from address from, wants its boot script; ok is false while
	// it waits to be named. An error wrapping ErrForbidden refuses a request that does not come
	// from the address bootd gave that MAC.
	Boot(mac net.HardwareAddr, from netip.Addr, facts Facts) (t Target, ok bool, err error)
	// Inventory is the JSON view of nodes and waiting machines.
	Inventory() any
}

// Files opens the files the listener serves: image files of verified versions, chunks of the
// chunk store, iPXE binaries, and the initrd carrying the node's fetch program.
type Files interface {
	OpenImageFile(image, version, file string) (*os.File, error)
	OpenChunk(prefix, name string) (*os.File, error)
	OpenLoader(name string) (*os.File, error)
	// OpenFetchInitrd opens the initrd of Options.FetchInitrd.
	OpenFetchInitrd() (*os.File, error)
}

// Peers knows which nodes serve which root image's chunks.
type Peers interface {
	// Announce records that the node at from serves the chunks of index (its sha256) on port; an
	// error wrapping ErrNotFound refuses an address that is no node's.
	Announce(from netip.Addr, index string, port uint16) (node string, err error)
	// List names other nodes serving index, as chunk store URLs.
	List(index string, from netip.Addr) []string
}

// ErrNotFound is what Files and Machines wrap when a request names nothing they know.
var ErrNotFound = errors.New("not found")

// ErrForbidden is what Machines wraps when a request comes from the wrong address.
var ErrForbidden = errors.New("forbidden")

// Options are the network facts the scripts carry, and the boot phase the downloads yield to.
type Options struct {
	BaseURL      string // e.g. http://10.80.0.1 (no trailing slash)
	Netmask      netip.Addr
	Gateway      netip.Addr    // zero: none
	DNS          []netip.Addr  // the lab's DNS servers: nameserver= on a node's command line
	PollInterval time.Duration // how often a waiting machine asks again
	Phase        BootPhase     // nil: downloads always yield (on the copiers)
	Meter        Meter         // counts requests; nil: none
	Progress     Progress      // told of image downloads; nil: nobody
	// Extra are read-only handlers served beside bootd's own, by ServeMux pattern (the lab's
	// page, /metrics, Prometheus service discovery: internal/bootd wires them).
	Extra map[string]http.Handler
	// FetchInitrd is the name of an initrd that carries the node's fetch program (bootd-fetch),
	// loaded after the image's own initrds of a version with a chunk index; "" when bootd has
	// none: nodes then fetch their root as one file.
	FetchInitrd string
}

// Meter counts what the listener does (internal/metrics implements it). Handlers call it
// concurrently.
type Meter interface {
	// HTTPRequest counts one request: the ServeMux pattern that took it ("" when none did), the
	// status, the time to the end of its response, and the response's bytes.
	HTTPRequest(route string, code int, took time.Duration, bytes int64)
	// NodeRequestRefused counts a node endpoint's refusal ("overlay", "hardware report",
	// "kickstart") by reason: "forbidden" (not the node: address, port or MAC), "not_found",
	// "invalid".
	NodeRequestRefused(endpoint, reason string)
}

// Progress follows machines through their boot: which file of its image each one fetches.
type Progress interface {
	// Fetching is called as a download of file (an image's kernel, initrd or root) to the
	// address from begins, Fetched as it ends (err: it was cut short).
	Fetching(from netip.Addr, file string)
	Fetched(from netip.Addr, file string, err error)
}

type noMeter struct{}

func (noMeter) HTTPRequest(string, int, time.Duration, int64) {}
func (noMeter) NodeRequestRefused(string, string)             {}

// BootPhase knows which machines are between their DHCP lease and their first HTTP request.
type BootPhase interface {
	// Asked records a request from address a.
	Asked(a netip.Addr)
	// Booting reports whether any machine is in that phase: downloads then send on the copiers
	// (bulk.go) and leave the CPU to DHCP, TFTP and the boot scripts first.
	Booting() bool
}

// Server serves bootd's HTTP.
type Server struct {
	opts     Options
	machines Machines
	files    Files
	nodes    Nodes
	peers    Peers
	roots    Roots
	log      logrus.FieldLogger
	// remote rate-limits the warnings any machine on the segment can trigger at will (refusals).
	remote *ratelog.Limiter
}

// New returns the HTTP listener's handler set. nodes may be nil: the node endpoints then
// answer 404.
func New(opts Options, m Machines, f Files, nodes Nodes, log logrus.FieldLogger) *Server {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 3 * time.Second
	}
	if opts.Meter == nil {
		opts.Meter = noMeter{}
	}
	return &Server{opts: opts, machines: m, files: f, nodes: nodes, log: log, remote: ratelog.New(ratelog.Every)}
}

// Handler routes bootd's endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boot.ipxe", s.bootScript)
	mux.HandleFunc("GET /ipxe/machine", s.machineScript)
	mux.HandleFunc("GET /ipxe/{file}", s.loader)
	mux.HandleFunc("GET /images/{image}/{version}/{file}", s.imageFile)
	mux.HandleFunc("GET /chunks/{prefix}/{name}", s.chunk)
	if s.opts.FetchInitrd != "" {
		mux.HandleFunc("GET /node/"+s.opts.FetchInitrd, s.fetchInitrd)
	}
	if s.peers != nil {
		mux.HandleFunc("POST /api/v1/node/peer", s.announcePeer)
		mux.HandleFunc("GET /api/v1/peers", s.listPeers)
	}
	if s.roots != nil {
		mux.HandleFunc("POST /api/v1/node/root", s.rootReport)
	}
	mux.HandleFunc("GET /api/v1/nodes", s.inventory)
	if s.nodes != nil {
		mux.HandleFunc("GET /api/v1/hello", s.hello)
		mux.HandleFunc("GET /api/v1/node/overlay", s.overlay)
		mux.HandleFunc("POST /api/v1/node/overlay", s.overlay)
		mux.HandleFunc("POST /api/v1/node/hardware", s.hardware)
		mux.HandleFunc("GET /api/v1/node/kickstart", s.kickstart)
		mux.HandleFunc("POST /api/v1/node/power", s.power)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	for pattern, h := range s.opts.Extra {
		mux.Handle(pattern, h)
	}
	return metered(mux, s.opts.Meter)
}

// bodyTimeout bounds reading a request's body. ReadHeaderTimeout covers only the headers: a
// client announcing a body and never sending it (or a byte a minute) would hold its connection
// for ever. The bodies bootd reads are a node's hardware report and its TPM keys, a few hundred
// bytes each.
var bodyTimeout = 10 * time.Second // a variable for tests

// shutdownGrace is how long a stopping bootd lets downloads in flight finish before it cuts
// them: a stalled client must not hold a restart for sendTimeout (a variable for tests).
var shutdownGrace = 5 * time.Second

// limitBodies gives every request that announces a body (Content-Length or chunked) bodyTimeout
// to deliver it, from the end of its headers. Requests without a body, the image downloads among
// them, are untouched. The server sets a fresh deadline for the connection's next request.
func limitBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyTimeout))
		}
		h.ServeHTTP(w, r)
	})
}

// noteAsked tells the boot phase of each request's address.
func (s *Server) noteAsked(h http.Handler) http.Handler {
	if s.opts.Phase == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if from, err := remoteAddr(r); err == nil {
			s.opts.Phase.Asked(from)
		}
		h.ServeHTTP(w, r)
	})
}

// onCopiers reports whether downloads should leave the CPU to boot work now.
func (s *Server) onCopiers() bool { return s.opts.Phase == nil || s.opts.Phase.Booting() }

// SetPeers lets nodes announce the chunks they serve and learn of each other (nil: no peers).
func (s *Server) SetPeers(p Peers) { s.peers = p }

// SetRoots lets nodes report where their root came from (nil: not recorded).
func (s *Server) SetRoots(r Roots) { s.roots = r }

// Serve answers on ln until ctx is done or ln fails, lets the requests in flight end, and then
// writes the counts of the refusals its rate limit held back; it returns ln's failure, or nil
// after ctx. Timeouts on headers, bodies and idle connections keep slow or stalled clients from
// holding the server; a file download must keep moving (progress.go) instead of a write timeout
// for the whole response, since images are large.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	// After <-shutDown below: requests in flight have ended, or were cut after the grace (a handler
	// still returning then logs into a window nobody writes).
	defer s.remote.Flush()
	srv := &http.Server{
		Handler:           limitBodies(s.noteAsked(s.Handler())),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          nil,
	}
	ctx, stop := context.WithCancel(ctx)
	shutDown := make(chan struct{})
	go func() {
		defer close(shutDown)
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if srv.Shutdown(shut) != nil {
			_ = srv.Close() // downloads still running after the grace are cut
		}
	}()
	err := srv.Serve(bulkListener{ln, s.onCopiers})
	// net/http's Serve returns as soon as Shutdown begins, or when the listener fails; either way
	// the requests in flight end as at a stop, so that none logs after the Flush. Shutdown returns
	// once they have ended, or after shutdownGrace with their connections closed: a sendfile call
	// then still in flight (on a copier or a download's thread) ends on its own, after Serve.
	stop()
	<-shutDown
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
