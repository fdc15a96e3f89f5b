package bootd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/check"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/hostlist"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/logfield"
	"github.com/labcluster/gpucluster/internal/masterssh"
)

// checkTimeout bounds a whole `bootd check`; each command in it has a bound of its own.
const checkTimeout = 15 * time.Minute

// Check runs `bootd check` on the nodes of the host lists (every assigned node when none) from
// the master, over SSH with the cluster's root key (internal/masterssh), and records the
// outcome: a ready node that passed is validated, a validated one that failed is ready again.
// One check runs at a time.
func (c controller) Check(ctx context.Context, names []string, progress func(string)) (check.Report, error) {
	d := c.d
	if !d.checking.TryLock() {
		return check.Report{}, &inventory.Conflict{Msg: "a check is running already: wait for its report"}
	}
	defer d.checking.Unlock()
	master, nodes, err := d.checkTargets(names)
	if err != nil {
		return check.Report{}, err
	}
	cs, err := d.secrets.Cluster()
	if err != nil {
		return check.Report{}, err
	}
	client := masterssh.New(masterssh.Config{
		Addr: netip.AddrPortFrom(master.Address, 22), RootKey: cs.Root.Private,
		HostCA: cs.HostCA.Public, Revoked: d.secrets.RevokedHostKeys(),
	})
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	d.log.WithFields(logrus.Fields{"nodes": len(nodes), "master": master.Name}).Info("bootd check started")
	rep := check.Run(ctx, client, check.Options{Master: master, Nodes: nodes, Progress: progress})
	for i, n := range rep.Nodes {
		rep.Nodes[i].State = d.recordCheck(n)
	}
	d.log.WithFields(logrus.Fields{"nodes": len(rep.Nodes), "passed": rep.Passed, "duration": logfield.Duration(rep.Took)}).Info("bootd check done")
	return rep, nil
}

// checkTargets returns the master and the nodes of the host lists to check (all when none): the
// master first, if it is one of them, then the others in the inventory's order.
func (d *daemon) checkTargets(lists []string) (inventory.Node, []inventory.Node, error) {
	names, err := hostlist.Expand(lists...)
	if err != nil {
		return inventory.Node{}, nil, ctl.Invalid(err)
	}
	all, _ := d.inv.Snapshot()
	i := slices.IndexFunc(all, func(n inventory.Node) bool { return n.Role == "master" })
	if i < 0 {
		return inventory.Node{}, nil, ctl.Invalid(errors.New("no master is assigned: every check runs from the master (`bootd assign master`)"))
	}
	master := all[i]
	for _, name := range names {
		if !slices.ContainsFunc(all, func(n inventory.Node) bool { return n.Name == name }) {
			return inventory.Node{}, nil, fmt.Errorf("node %s: %w (see `bootd nodes`)", name, inventory.ErrNotFound)
		}
	}
	nodes := append([]inventory.Node{master}, slices.Delete(slices.Clone(all), i, i+1)...)
	if len(names) > 0 {
		nodes = slices.DeleteFunc(nodes, func(n inventory.Node) bool { return !slices.Contains(names, n.Name) })
	}
	return master, nodes, nil
}

// recordCheck moves the node's state by its report, logs the outcome, and returns the state. A
// node the check skipped keeps its state.
func (d *daemon) recordCheck(r check.NodeReport) inventory.State {
	log := d.log.WithField("node", r.Name)
	if r.Skipped {
		n, err := d.inv.NodeByName(r.Name)
		if err != nil {
			return ""
		}
		log.Info("node not checked: " + r.Results[0].Detail)
		return n.State
	}
	var failed []string
	for _, f := range r.Failed() {
		failed = append(failed, f.Check)
	}
	if len(failed) > 0 {
		log = log.WithField("failed", strings.Join(failed, ","))
	}
	n, changed, err := d.inv.SetChecked(r.Name, r.Passed)
	if err != nil {
		log.WithError(err).Warn("check outcome not recorded")
		return ""
	}
	switch {
	case changed && r.Passed:
		log.Info("node validated by bootd check")
	case changed:
		log.Warn("node failed bootd check: no longer validated")
	case !r.Passed:
		log.Warn("node failed bootd check")
	}
	return n.State
}
