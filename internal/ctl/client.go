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
}

// NewClient returns a client for the socket at path.
func NewClient(path string) *Client {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}
	return &Client{path: path, http: &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 30 * time.Second}}
}

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

// Unassign forgets a node.
func (c *Client) Unassign(name string) (inventory.Node, error) {
	var n inventory.Node
	return n, c.do(http.MethodPost, "/v1/unassign", UnassignRequest{Name: name}, &n)
}

func (c *Client) do(method, path string, body, out any) error {
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
	resp, err := c.http.Do(req)
	if err != nil {
		return c.dialError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e ErrorReply
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			return fmt.Errorf("bootd answered %s", resp.Status)
		}
		return &Error{Status: resp.StatusCode, Message: e.Error, Waiting: e.Waiting}
	}
	return json.NewDecoder(resp.Body).Decode(out)
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
