package bootd

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/labcluster/gpucluster/internal/check"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/inventory"
)

// assignAll names a machine for each name, as `bootd assign` does after it netbooted.
func assignAll(t *testing.T, d *daemon, names ...string) {
	t.Helper()
	for i, name := range names {
		mac := []string{"52:54:00:00:0c:01", "52:54:00:00:0c:02", "52:54:00:00:0c:03"}[i]
		if _, _, err := d.inv.See(mac, inventory.Facts{}); err != nil {
			t.Fatal(err)
		}
		if _, err := (controller{d}).Assign(ctl.AssignRequest{Name: name, MAC: mac}); err != nil {
			t.Fatal(err)
		}
	}
}

// A check that cannot run is refused before it starts, with the status the CLI shows.
func TestCheckRefused(t *testing.T) {
	noop := func(string) {}
	t.Run("no master", func(t *testing.T) {
		d := testDaemon(t)
		assignAll(t, d, "c1")
		if _, err := (controller{d}).Check(context.Background(), nil, noop); !errors.Is(err, ctl.ErrInvalid) {
			t.Fatalf("err = %v, want ErrInvalid", err)
		}
	})
	t.Run("unknown node", func(t *testing.T) {
		d := testDaemon(t)
		assignAll(t, d, "master", "c1")
		if _, err := (controller{d}).Check(context.Background(), []string{"c1", "c7"}, noop); !errors.Is(err, inventory.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	})
	t.Run("bad host list", func(t *testing.T) {
		d := testDaemon(t)
		assignAll(t, d, "master", "c1")
		if _, err := (controller{d}).Check(context.Background(), []string{"c[1-"}, noop); !errors.Is(err, ctl.ErrInvalid) {
			t.Fatalf("err = %v, want ErrInvalid", err)
		}
	})
	t.Run("one at a time", func(t *testing.T) {
		d := testDaemon(t)
		assignAll(t, d, "master")
		d.checking.Lock()
		defer d.checking.Unlock()
		var conflict *inventory.Conflict
		if _, err := (controller{d}).Check(context.Background(), nil, noop); !errors.As(err, &conflict) {
			t.Fatalf("err = %v, want a Conflict", err)
		}
	})
}

func TestCheckTargets(t *testing.T) {
	d := testDaemon(t)
	assignAll(t, d, "c2", "master", "c1")
	for _, tt := range []struct {
		names, want []string
	}{
		{nil, []string{"master", "c1", "c2"}},
		{[]string{"c2", "c1"}, []string{"c1", "c2"}},
		{[]string{"c1", "c1"}, []string{"c1"}},
		{[]string{"c[1-2]", "master"}, []string{"master", "c1", "c2"}},
	} {
		master, nodes, err := d.checkTargets(tt.names)
		var got []string
		for _, n := range nodes {
			got = append(got, n.Name)
		}
		if err != nil || master.Name != "master" || !slices.Equal(got, tt.want) {
			t.Errorf("checkTargets(%q) = %s, %q, %v; want master, %q", tt.names, master.Name, got, err, tt.want)
		}
	}
}

// A ready node that passed is validated; failing again makes it ready.
func TestRecordCheck(t *testing.T) {
	d := testDaemon(t)
	assignAll(t, d, "c1")
	if _, err := d.inv.SetHardware("c1", inventory.Hardware{CPUs: 2, RealMemoryMiB: 1000}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		passed bool
		want   inventory.State
	}{{true, inventory.StateValidated}, {true, inventory.StateValidated}, {false, inventory.StateReady}} {
		r := check.NodeReport{Name: "c1", Passed: step.passed}
		if !step.passed {
			r.Results = []check.Result{{Check: check.Munge, Status: check.Fail}}
		}
		if got := d.recordCheck(r); got != step.want {
			t.Fatalf("after a check that passed %v: %s, want %s", step.passed, got, step.want)
		}
	}
	// A node the check skipped (switched off by Slurm) keeps its state.
	if _, _, err := d.inv.SetChecked("c1", true); err != nil {
		t.Fatal(err)
	}
	skipped := check.NodeReport{Name: "c1", Skipped: true, Results: []check.Result{{Check: check.Slurmd, Status: check.Skip, Detail: "switched off"}}}
	if got := d.recordCheck(skipped); got != inventory.StateValidated {
		t.Fatalf("after a skipped check: %s, want %s", got, inventory.StateValidated)
	}
}
