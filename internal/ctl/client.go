package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/labcluster/gpucluster/internal/check"
	"github.com/labcluster/gpucluster/internal/inventory"
)

// ErrNotRunning means no daemon answers on the control socket.
var ErrNotRunning = errors.New("bootd is not running")

// Error is a request the daemon refused, with its explanation.
type Error struct {
	Status  int
	Message string
	Waiting []inventory.Machine
}

func (e *Error) Error() string { return e.Message }

// Client talks to a running bootd through its control socket.
type Client struct {
	path string
	http *http.Client
	slow *http.Client // without a timeout: for requests the daemon bounds itself (Power, Check)
}

// NewClient returns a client for the socket at path.
func NewClient(path string) *Client {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}
	tr := &http.Transport{DialContext: dial}
	return &Client{path: path, http: &http.Client{Transport: tr, Timeout: 30 * time.Second}, slow: &http.Client{Transport: tr}}
}

// SetTimeout bounds every request but the slow ones (Power, Check) to d: shell completion must
// not hang.
func (c *Client) SetTimeout(d time.Duration) { c.http.Timeout = d }

// Nodes returns the inventory.
func (c *Client) Nodes() (NodesReply, error) {
	var r NodesReply
	return r, c.do(http.MethodGet, "/v1/nodes", nil, &r)
}

// Assign binds a machine to a name. A daemon older than AssignReply answers with the node
// alone: its Image is zero.
func (c *Client) Assign(req AssignRequest) (AssignReply, error) {
	var r AssignReply
	return r, c.do(http.MethodPost, "/v1/assign", req, &r)
}

// Power takes an action on nodes' power and waits for every node's result: each BMC is asked
// in turn (a few at once), and a BMC that does not answer takes the daemon's per-node timeout,
// so the request has none of its own.
func (c *Client) Power(req PowerRequest) (PowerReply, error) {
	var r PowerReply
	return r, c.doWith(c.slow, http.MethodPost, "/v1/power", req, &r)
}

// SetBMCPassword hands a BMC password to the daemon, which keeps it with its secrets.
func (c *Client) SetBMCPassword(req BMCPasswordRequest) error {
	var ok struct{}
	return c.do(http.MethodPost, "/v1/bmc-password", req, &ok)
}

// Names returns the node names and waiting MACs, for shell completion.
func (c *Client) Names() (Names, error) {
	var n Names
	return n, c.do(http.MethodGet, "/v1/names", nil, &n)
}

// Unassign forgets a node.
func (c *Client) Unassign(name string) (inventory.Node, error) {
	var n inventory.Node
	return n, c.do(http.MethodPost, "/v1/unassign", UnassignRequest{Name: name}, &n)
}

// Check runs a check of the named nodes (all when none) and returns its report, calling progress
// with each line of progress the daemon sends meanwhile. It waits as long as the check takes:
// the daemon bounds it.
func (c *Client) Check(names []string, progress func(string)) (check.Report, error) {
	b, err := json.Marshal(CheckRequest{Names: names})
	if err != nil {
		return check.Report{}, err
	}
	req, err := http.NewRequest(http.MethodPost, "http://bootd/v1/check", bytes.NewReader(b))
	if err != nil {
		return check.Report{}, err
	}
	resp, err := c.slow.Do(req)
	if err != nil {
		return check.Report{}, c.dialError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return check.Report{}, errorReply(resp)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev CheckEvent
		if err := dec.Decode(&ev); err != nil {
			return check.Report{}, fmt.Errorf("bootd's answer to check ended early: %w", err)
		}
		switch {
		case ev.Error != "":
			return check.Report{}, errors.New(ev.Error)
		case ev.Report != nil:
			return *ev.Report, nil
		case progress != nil:
			progress(ev.Progress)
		}
	}
}

func (c *Client) do(method, path string, body, out any) error {
	return c.doWith(c.http, method, path, body, out)
}

func (c *Client) doWith(hc *http.Client, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://bootd"+path, rd)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return c.dialError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errorReply(resp)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// errorReply is the error a refused request's body explains.
func errorReply(resp *http.Response) error {
	var e ErrorReply
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		return fmt.Errorf("bootd answered %s", resp.Status)
	}
	return &Error{Status: resp.StatusCode, Message: e.Error, Waiting: e.Waiting}
}

func (c *Client) dialError(err error) error {
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w: no daemon answers on %s; start it with `bootd serve` (or `systemctl start bootd`), or pass the --state-dir it uses", ErrNotRunning, c.path)
	}
	if errors.Is(err, syscall.EACCES) {
		return fmt.Errorf("cannot reach bootd at %s: permission denied (run as root)", c.path)
	}
	return fmt.Errorf("cannot reach bootd at %s: %w", c.path, err)
}
