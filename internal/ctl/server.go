package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/labcluster/gpucluster/internal/check"
	"github.com/labcluster/gpucluster/internal/inventory"
)

// ErrInvalid is what a Controller wraps for a request that can never succeed as given (a name
// that fits no role, a malformed MAC).
var ErrInvalid = errors.New("invalid request")

// Invalid marks err as ErrInvalid, keeping its message.
func Invalid(err error) error { return invalidError{err} }

type invalidError struct{ error }

func (e invalidError) Unwrap() error      { return e.error }
func (invalidError) Is(target error) bool { return target == ErrInvalid }

// Controller is what the control API needs from the daemon.
type Controller interface {
	Nodes() NodesReply
	Assign(AssignRequest) (inventory.Assignment, error)
	// BootImage says what node name boots now: asked after an assign, whose answer includes it.
	BootImage(name string) BootImage
	Unassign(name string) (inventory.Node, error)
	// Power takes an action on the nodes of the host lists; an unknown name is ErrInvalid.
	Power(ctx context.Context, r PowerRequest) (PowerReply, error)
	SetBMCPassword(r BMCPasswordRequest) error
	Names() Names
	// Check runs `bootd check` on the named nodes (all when none), telling progress as it goes,
	// and records who passed. A request that cannot run (an unknown name, no master, a check
	// already running) fails before any progress.
	Check(ctx context.Context, names []string, progress func(string)) (check.Report, error)
}

// Serve answers control requests on the unix socket at path until ctx is done. A stale socket
// from a crashed daemon is replaced; a live one means another bootd runs, which is refused.
func Serve(ctx context.Context, path string, c Controller) error {
	ln, err := listen(path)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler(c), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	defer os.Remove(path)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func listen(path string) (net.Listener, error) {
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		conn.Close()
		return nil, errors.New("another bootd is already running (its control socket " + path + " answers)")
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// Root only. The state directory is 0700 too, which covers the moment before this chmod
	// (a process-wide umask would race with other goroutines creating files).
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

func handler(c Controller) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusOK, c.Nodes())
	})
	mux.HandleFunc("POST /v1/assign", func(w http.ResponseWriter, r *http.Request) {
		var req AssignRequest
		if !decode(w, r, &req) {
			return
		}
		a, err := c.Assign(req)
		if err != nil {
			fail(w, err)
			return
		}
		// A node whose role has no bootable image waits at its boot screen: the admin learns
		// it here, not from the node's console.
		ar := AssignReply{Node: a.Node, Image: c.BootImage(a.Name)}
		if a.Replaced != nil {
			ar.Replaced = a.Replaced.MAC
		}
		reply(w, http.StatusOK, ar)
	})
	mux.HandleFunc("POST /v1/power", func(w http.ResponseWriter, r *http.Request) {
		var req PowerRequest
		if !decode(w, r, &req) {
			return
		}
		pr, err := c.Power(r.Context(), req)
		if err != nil {
			fail(w, err)
			return
		}
		reply(w, http.StatusOK, pr)
	})
	mux.HandleFunc("POST /v1/bmc-password", func(w http.ResponseWriter, r *http.Request) {
		var req BMCPasswordRequest
		if !decode(w, r, &req) {
			return
		}
		if err := c.SetBMCPassword(req); err != nil {
			fail(w, err)
			return
		}
		reply(w, http.StatusOK, struct{}{})
	})
	mux.HandleFunc("GET /v1/names", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusOK, c.Names())
	})
	mux.HandleFunc("POST /v1/unassign", func(w http.ResponseWriter, r *http.Request) {
		var req UnassignRequest
		if !decode(w, r, &req) {
			return
		}
		n, err := c.Unassign(req.Name)
		if err != nil {
			fail(w, err)
			return
		}
		reply(w, http.StatusOK, n)
	})
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		var req CheckRequest
		if !decode(w, r, &req) {
			return
		}
		checkStream(w, r, c, req)
	})
	return mux
}

// checkStream answers a check with its progress as it comes and the report at the end, one JSON
// object a line, each flushed at once. Until the first line is out, a refusal still gets its own
// status.
func checkStream(w http.ResponseWriter, r *http.Request, c Controller, req CheckRequest) {
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	started := false
	send := func(ev CheckEvent) {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		_ = enc.Encode(ev)
		if flusher != nil {
			flusher.Flush()
		}
	}
	var mu sync.Mutex // progress may come from the check's goroutines
	rep, err := c.Check(r.Context(), req.Names, func(p string) {
		mu.Lock()
		defer mu.Unlock()
		send(CheckEvent{Progress: p})
	})
	mu.Lock()
	defer mu.Unlock()
	switch {
	case err != nil && !started:
		fail(w, err)
	case err != nil:
		send(CheckEvent{Error: err.Error()})
	default:
		send(CheckEvent{Report: &rep})
	}
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		reply(w, http.StatusBadRequest, ErrorReply{Error: "bad request: " + err.Error()})
		return false
	}
	return true
}

// fail answers a refused request with the status its error calls for.
func fail(w http.ResponseWriter, err error) {
	var amb *inventory.Ambiguous
	var conflict *inventory.Conflict
	switch {
	case errors.As(err, &amb):
		reply(w, http.StatusConflict, ErrorReply{Error: err.Error(), Waiting: amb.Waiting})
	case errors.As(err, &conflict):
		reply(w, http.StatusConflict, ErrorReply{Error: err.Error()})
	case errors.Is(err, inventory.ErrNotFound):
		reply(w, http.StatusNotFound, ErrorReply{Error: err.Error()})
	case errors.Is(err, ErrInvalid):
		reply(w, http.StatusBadRequest, ErrorReply{Error: err.Error()})
	default: // the inventory could not be saved, or worse: the daemon's fault, not the request's
		reply(w, http.StatusInternalServerError, ErrorReply{Error: err.Error()})
	}
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
