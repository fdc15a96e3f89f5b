package bootd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/hostlist"
	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/power"
	"github.com/labcluster/gpucluster/internal/secrets"
)

// powerPoll is how often bootd asks every BMC for its node's power, for `bootd nodes`.
const powerPoll = time.Minute

// powerBook is what bootd last learned of each node's power: from its BMC, or the magic
// packets it sent to a node without one. In memory only: a restart asks the BMCs again.
type powerBook struct {
	mu sync.Mutex
	m  map[string]power.Result
}

// record keeps rs, and returns the results whose state or failure differs from the last one
// known for the node (the first one counts as a change).
func (b *powerBook) record(rs []power.Result) []power.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]power.Result{}
	}
	var changed []power.Result
	for _, r := range rs {
		if r.Method == power.MethodWoL && r.Failed() {
			continue // a PC without a BMC that bootd could not switch off: nothing learned
		}
		old, ok := b.m[r.Node]
		if !ok || old.State != r.State || old.Failed() != r.Failed() {
			changed = append(changed, r)
		}
		b.m[r.Node] = r
	}
	return changed
}

func (b *powerBook) snapshot() map[string]power.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.m)
}

// switchPower takes action on the nodes of the host lists and records what their BMCs say. by
// says who asked, for the log.
func (d *daemon) switchPower(ctx context.Context, a power.Action, lists []string, by string) ([]power.Result, error) {
	targets, err := d.powerTargets(lists)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.Node
	}
	log := d.log.WithFields(logrus.Fields{"action": a, "by": by})
	if a != power.Status {
		log.WithField("nodes", strings.Join(names, ",")).Info("power action")
	}
	rs := d.power.Do(ctx, a, targets)
	d.powered.record(rs)
	for _, r := range rs {
		d.logPower(log, r, a != power.Status)
	}
	return rs, nil
}

// logPower logs a node's result: a failure always, a success when it changed something.
func (d *daemon) logPower(log logrus.FieldLogger, r power.Result, changed bool) {
	log = log.WithFields(logrus.Fields{"node": r.Node, "method": r.Method, "state": r.State})
	if r.BMC != "" {
		log = log.WithField("bmc", r.BMC)
	}
	switch {
	case r.Failed():
		log.WithField("error", r.Error).Warn("power: node not reached")
	case changed:
		log.WithField("done", r.Done).Info("power: done")
	}
}

// powerTargets expands the host lists into assigned nodes, each with its BMC and password (a
// missing password is the node's own failure) or its MAC for Wake-on-LAN.
func (d *daemon) powerTargets(lists []string) ([]power.Target, error) {
	names, err := hostlist.Expand(lists...)
	if err != nil {
		return nil, ctl.Invalid(err)
	}
	if len(names) == 0 {
		return nil, ctl.Invalid(errors.New("no node named: give names or host lists (c1, c[1-4], master)"))
	}
	nodes, _ := d.inv.Snapshot()
	byName := map[string]inventory.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	var targets []power.Target
	var unknown []string
	for _, name := range names {
		n, ok := byName[name]
		if !ok {
			unknown = append(unknown, name)
			continue
		}
		targets = append(targets, d.powerTarget(n))
	}
	if len(unknown) > 0 {
		return nil, ctl.Invalid(fmt.Errorf("no node called %s: `bootd nodes` lists the nodes (a machine must be assigned before bootd switches it)", strings.Join(unknown, ", ")))
	}
	return targets, nil
}

func (d *daemon) powerTarget(n inventory.Node) power.Target {
	t := power.Target{Node: n.Name}
	if mac, err := net.ParseMAC(n.MAC); err == nil {
		t.MAC = mac
	}
	b, ok := d.cfg.BMCOf(n.Name)
	if !ok {
		return t
	}
	pw, err := d.secrets.BMCPassword(n.Name)
	t.BMC = &power.BMC{Protocol: b.Protocol, Address: b.Address, User: b.User, Password: power.Secret(pw)}
	t.Err = err
	return t
}

// pollPower asks every node's BMC for its power at start and then every powerPoll, so `bootd
// nodes` shows it; a BMC that stops answering, or answers again, is logged once.
func (d *daemon) pollPower(ctx context.Context) {
	for {
		var targets []power.Target
		nodes, _ := d.inv.Snapshot()
		for _, n := range nodes {
			if _, ok := d.cfg.BMCOf(n.Name); ok {
				targets = append(targets, d.powerTarget(n))
			}
		}
		if len(targets) > 0 {
			changed := d.powered.record(d.power.Do(ctx, power.Status, targets))
			for _, r := range changed {
				d.logPower(d.log.WithField("by", "poll"), r, true)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(powerPoll):
		}
	}
}

// setBMCPassword keeps a BMC password the admin gave through the control socket.
func (d *daemon) setBMCPassword(r ctl.BMCPasswordRequest) error {
	if r.Node != "" {
		if _, err := d.cfg.Place(r.Node); err != nil {
			return ctl.Invalid(err)
		}
	}
	if err := secrets.CheckBMCPassword(secrets.BMCPassword(r.Password)); err != nil {
		return ctl.Invalid(err)
	}
	if err := d.secrets.SetBMCPassword(r.Node, secrets.BMCPassword(r.Password)); err != nil {
		return err
	}
	which := r.Node
	if which == "" {
		which = "(default)"
	}
	d.log.WithField("node", which).Info("BMC password set")
	return nil
}

// nodePowerRequest is what the master's /etc/slurm/bootd-power sends.
type nodePowerRequest struct {
	Action string `json:"action"` // on or off
	Nodes  string `json:"nodes"`  // a host list, as Slurm passes it
}

// nodePower carries out the master's power request (Slurm's SuspendProgram and ResumeProgram
// run bootd-power, which asks from a privileged port): identified as the overlay's requests
// are, and for computes only. The reply is one line per node, for a shell script:
// "NAME METHOD ok|failed WHAT".
func (d *daemon) nodePower(ctx context.Context, from netip.AddrPort, token string, body []byte) (string, []byte, error) {
	d.identity.RLock()
	asker, err := d.identifyReport(from, token)
	d.identity.RUnlock()
	if err != nil {
		return "", nil, err
	}
	if asker.Role != "master" {
		return "", nil, fmt.Errorf("%s (%s) asked to switch nodes: only the master may (Slurm's power saving): %w", asker.Name, asker.Role, httpd.ErrForbidden)
	}
	var req nodePowerRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return asker.Name, nil, fmt.Errorf("power request: %w: %w", err, httpd.ErrInvalid)
	}
	a, err := power.ParseAction(req.Action)
	if err != nil || a == power.Cycle {
		return asker.Name, nil, fmt.Errorf("power request: action %q (want on, off or status): %w", req.Action, httpd.ErrInvalid)
	}
	if err := d.onlyComputes(req.Nodes); err != nil {
		return asker.Name, nil, err
	}
	// Carried out whole even when the asker hangs up: a BMC half asked helps no one.
	rs, err := d.switchPower(context.WithoutCancel(ctx), a, []string{req.Nodes}, asker.Name)
	if err != nil {
		return asker.Name, nil, fmt.Errorf("power request: %w: %w", err, httpd.ErrInvalid)
	}
	var b strings.Builder
	for _, r := range rs {
		status, what := "ok", r.Done
		if r.Failed() {
			status, what = "failed", r.Error
		}
		if a == power.Status {
			what = string(r.State)
		}
		fmt.Fprintf(&b, "%s %s %s %s\n", r.Node, r.Method, status, strings.Join(strings.Fields(what), " "))
	}
	return asker.Name, []byte(b.String()), nil
}

// onlyComputes refuses a host list that names the master (or anything but a compute): Slurm
// switches computes, and a compromised Slurm account must not switch off the master.
func (d *daemon) onlyComputes(list string) error {
	names, err := hostlist.Expand(list)
	if err != nil {
		return fmt.Errorf("power request: %w: %w", err, httpd.ErrInvalid)
	}
	for _, name := range names {
		if p, err := d.cfg.Place(name); err == nil && p.Role != "compute" {
			return fmt.Errorf("power request for %s, a %s: the master may switch computes only: %w", name, p.Role, httpd.ErrForbidden)
		}
	}
	return nil
}

// names lists what shell completion offers: node names, the MACs of machines waiting, and the
// names free to assign next.
func (d *daemon) names() ctl.Names {
	nodes, waiting := d.inv.Snapshot()
	out := ctl.Names{Nodes: []string{}, Waiting: []string{}, Free: []string{}}
	taken := map[string]bool{}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, n.Name)
		taken[n.Name] = true
	}
	if !taken[d.cfg.Master.Name] {
		out.Free = append(out.Free, d.cfg.Master.Name)
	}
	for i := 1; i <= d.cfg.Compute.MaxNodes; i++ {
		if name := d.cfg.ComputeName(i); !taken[name] {
			out.Free = append(out.Free, name)
			break
		}
	}
	for _, m := range waiting {
		out.Waiting = append(out.Waiting, m.MAC)
	}
	slices.Sort(out.Waiting)
	return out
}
