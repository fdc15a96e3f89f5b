package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/check"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/power"
)

type fakeController struct{}

func (fakeController) Nodes() NodesReply {
	return NodesReply{Nodes: []inventory.Node{{Name: "c1"}}, Waiting: []inventory.Machine{{MAC: "52:54:00:00:00:01"}}}
}

func (fakeController) Assign(r AssignRequest) (inventory.Assignment, error) {
	switch r.Name {
	case "c1", "master":
		return inventory.Assignment{Node: inventory.Node{Name: r.Name, MAC: r.MAC}}, nil
	case "c4":
		return inventory.Assignment{Node: inventory.Node{Name: r.Name, MAC: r.MAC}, Replaced: &inventory.Node{Name: r.Name, MAC: "52:54:00:00:00:04"}}, nil
	case "c2":
		return inventory.Assignment{}, &inventory.Ambiguous{Waiting: []inventory.Machine{{MAC: "a"}, {MAC: "b"}}}
	case "c3":
		return inventory.Assignment{}, &inventory.Conflict{Msg: "name c3 is already bound"}
	}
	if r.Name == "c5" {
		return inventory.Assignment{}, errors.New("save inventory: disk full")
	}
	return inventory.Assignment{}, Invalid(errors.New(`name "` + r.Name + `" fits no role`))
}

func (fakeController) BootImage(name string) BootImage {
	if name == "master" {
		return BootImage{Name: "master", Dir: "/srv/images", Problem: "resolve image master: not found"}
	}
	return BootImage{Name: "compute", Version: "2026.11.21-1", Dir: "/srv/images"}
}

func (fakeController) Unassign(name string) (inventory.Node, error) {
	return inventory.Node{}, errors.Join(errors.New("node "+name), inventory.ErrNotFound)
}

func (fakeController) Power(_ context.Context, r PowerRequest) (PowerReply, error) {
	if r.Action == "reboot" {
		return PowerReply{}, Invalid(errors.New(`unknown power action "reboot"`))
	}
	var out PowerReply
	for _, n := range r.Nodes {
		out.Results = append(out.Results, power.Result{Node: n, Method: power.MethodIPMI, State: power.StateOn, Done: "switched " + r.Action})
	}
	return out, nil
}

func (fakeController) SetBMCPassword(r BMCPasswordRequest) error {
	if r.Password == "" {
		return Invalid(errors.New("an empty BMC password"))
	}
	return nil
}

func (fakeController) Names() Names {
	return Names{Nodes: []string{"master", "c1"}, Waiting: []string{"52:54:00:00:00:09"}}
}

// Check passes c1, fails c2, refuses c9 (unknown) and breaks off after progress for "broken".
func (fakeController) Check(_ context.Context, names []string, progress func(string)) (check.Report, error) {
	if slices.Contains(names, "c9") {
		return check.Report{}, errors.Join(errors.New("node c9"), inventory.ErrNotFound)
	}
	progress("checking")
	progress("c1: node checks done (1 of 2)")
	if slices.Contains(names, "broken") {
		return check.Report{}, errors.New("the inventory could not be saved")
	}
	return check.Report{Nodes: []check.NodeReport{
		{Name: "c1", Passed: true, State: inventory.StateValidated, Results: []check.Result{{Check: check.Munge, Status: check.Pass}}},
		{Name: "c2", State: inventory.StateReady, Results: []check.Result{{Check: check.Munge, Status: check.Fail, Detail: "keys differ", Fix: "restart"}}},
	}}, nil
}

func startServer(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), SocketName)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, path, fakeController{}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	for range 100 {
		if _, err := os.Stat(path); err == nil {
			return path
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("control socket did not appear")
	return ""
}

func TestClientServer(t *testing.T) {
	path := startServer(t)
	c := NewClient(path)
	tests := []struct {
		name       string
		call       func() error
		wantStatus int // 0: success
		wantMsg    string
		wantWait   int
	}{
		{"nodes", func() error {
			r, err := c.Nodes()
			ok(t, len(r.Nodes) == 1 && len(r.Waiting) == 1, "nodes reply %+v", r)
			return err
		}, 0, "", 0},
		{"assign", func() error {
			r, err := c.Assign(AssignRequest{Name: "c1", MAC: "m"})
			ok(t, err != nil || r.MAC == "m" && r.Replaced == "" && r.Image.Version == "2026.11.21-1", "assign reply %+v", r)
			return err
		}, 0, "", 0},
		{"assign --replace names the machine replaced", func() error {
			r, err := c.Assign(AssignRequest{Name: "c4", MAC: "52:54:00:00:00:14", Replace: true})
			ok(t, err != nil || r.MAC == "52:54:00:00:00:14" && r.Replaced == "52:54:00:00:00:04", "assign reply %+v", r)
			return err
		}, 0, "", 0},
		{"assign without an image", func() error {
			r, err := c.Assign(AssignRequest{Name: "master"})
			ok(t, err != nil || r.Image.Version == "" && r.Image.Dir == "/srv/images" && r.Image.Problem != "", "assign reply %+v", r)
			return err
		}, 0, "", 0},
		{"ambiguous lists the waiting", func() error { _, err := c.Assign(AssignRequest{Name: "c2"}); return err }, http.StatusConflict, "choose one with --mac", 2},
		{"conflict", func() error { _, err := c.Assign(AssignRequest{Name: "c3"}); return err }, http.StatusConflict, "already bound", 0},
		{"bad name", func() error { _, err := c.Assign(AssignRequest{Name: "gpu"}); return err }, http.StatusBadRequest, "fits no role", 0},
		{"daemon failure", func() error { _, err := c.Assign(AssignRequest{Name: "c5"}); return err }, http.StatusInternalServerError, "disk full", 0},
		{"not found", func() error { _, err := c.Unassign("c9"); return err }, http.StatusNotFound, "node c9", 0},
		{"power", func() error {
			r, err := c.Power(PowerRequest{Action: "on", Nodes: []string{"c1", "c2"}})
			ok(t, err != nil || len(r.Results) == 2 && r.Results[1].Node == "c2" && r.Results[1].Done == "switched on", "power reply %+v", r)
			return err
		}, 0, "", 0},
		{"power: bad action", func() error { _, err := c.Power(PowerRequest{Action: "reboot", Nodes: []string{"c1"}}); return err }, http.StatusBadRequest, "reboot", 0},
		{"BMC password", func() error { return c.SetBMCPassword(BMCPasswordRequest{Node: "c1", Password: "pw"}) }, 0, "", 0},
		{"BMC password: empty", func() error { return c.SetBMCPassword(BMCPasswordRequest{Node: "c1"}) }, http.StatusBadRequest, "empty", 0},
		{"names", func() error {
			n, err := c.Names()
			ok(t, err != nil || len(n.Nodes) == 2 && n.Waiting[0] == "52:54:00:00:00:09", "names %+v", n)
			return err
		}, 0, "", 0},
		{"check streams progress, then the report", func() error {
			var progress []string
			r, err := c.Check(nil, func(p string) { progress = append(progress, p) })
			ok(t, err != nil || len(r.Nodes) == 2 && r.Nodes[1].Results[0].Fix == "restart" && len(progress) == 2, "check reply %+v, progress %q", r, progress)
			return err
		}, 0, "", 0},
		{"check of an unknown node", func() error { _, err := c.Check([]string{"c9"}, nil); return err }, http.StatusNotFound, "node c9", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if tt.wantStatus == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Status != tt.wantStatus || !strings.Contains(e.Message, tt.wantMsg) || len(e.Waiting) != tt.wantWait {
				t.Fatalf("err = %#v, want status %d with %q and %d waiting", err, tt.wantStatus, tt.wantMsg, tt.wantWait)
			}
		})
	}
}

func ok(t *testing.T, cond bool, format string, args ...any) {
	t.Helper()
	if !cond {
		t.Errorf(format, args...)
	}
}

func TestSocketIsPrivate(t *testing.T) {
	st, err := os.Stat(startServer(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		t.Fatalf("socket mode %v: others could manage the lab", st.Mode().Perm())
	}
}

func TestSecondDaemonRefused(t *testing.T) {
	path := startServer(t)
	err := Serve(context.Background(), path, fakeController{})
	if err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("err = %v, want already running", err)
	}
}

func TestNotRunning(t *testing.T) {
	_, err := NewClient(filepath.Join(t.TempDir(), SocketName)).Nodes()
	if !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), "bootd serve") {
		t.Fatalf("err = %v, want ErrNotRunning with a hint", err)
	}
}

// TestNodesReplyArrays: nodes and waiting are JSON arrays, never null, so `jq '.nodes[]'` works
// on a fresh daemon as on a busy one.
func TestNodesReplyArrays(t *testing.T) {
	for _, tt := range []struct {
		name        string
		r           NodesReply
		nodes, wait int
	}{
		{"fresh daemon", NodesReply{}, 0, 0},
		{"emptied lists", NodesReply{Nodes: []inventory.Node{}, Waiting: []inventory.Machine{}}, 0, 0},
		{"one of each", NodesReply{Nodes: []inventory.Node{{Name: "c1"}}, Waiting: []inventory.Machine{{MAC: "52:54:00:00:00:01"}}}, 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			handler(nodesController{r: tt.r}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/nodes", nil))
			var got map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			nodes, ok1 := got["nodes"].([]any)
			waiting, ok2 := got["waiting"].([]any)
			if !ok1 || !ok2 || len(nodes) != tt.nodes || len(waiting) != tt.wait {
				t.Fatalf("reply %s: want arrays of %d nodes and %d waiting", rec.Body, tt.nodes, tt.wait)
			}
		})
	}
}

// nodesController answers Nodes with r.
type nodesController struct {
	fakeController
	r NodesReply
}

func (c nodesController) Nodes() NodesReply { return c.r }

// A check that fails after its progress began ends its answer with the error.
func TestCheckBrokenOff(t *testing.T) {
	c := NewClient(startServer(t))
	var progress []string
	_, err := c.Check([]string{"broken"}, func(p string) { progress = append(progress, p) })
	if err == nil || !strings.Contains(err.Error(), "could not be saved") || len(progress) != 2 {
		t.Fatalf("err = %v, progress %q", err, progress)
	}
}
