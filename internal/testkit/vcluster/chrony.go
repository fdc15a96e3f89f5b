package vcluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// chronySocket is chronyd's command socket, on the node's own /run.
const chronySocket = "/run/chrony/chronyd.sock"

// Tracking is what `chronyc -n tracking` says about whom a node's clock follows.
type Tracking struct {
	RefID   string // the reference's ID in hex: a source's IPv4 address, 7F7F0101 for the node's own clock ("local")
	RefName string // in parentheses after the ID: the source's address (-n), "" for none or local
	Stratum int
	Leap    string // "Normal" once synchronised, "Not synchronised" before
}

// parseTracking reads the lines of `chronyc -n tracking` that Tracking holds.
func parseTracking(out string) (Tracking, error) {
	var tr Tracking
	seen := 0
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "Reference ID":
			id, name, _ := strings.Cut(v, " ")
			tr.RefID, tr.RefName = id, strings.Trim(name, "()")
			seen++
		case "Stratum":
			n, err := strconv.Atoi(v)
			if err != nil {
				return tr, fmt.Errorf("tracking: stratum %q", v)
			}
			tr.Stratum = n
			seen++
		case "Leap status":
			tr.Leap = v
			seen++
		}
	}
	if seen != 3 {
		return tr, fmt.Errorf("tracking: no reference ID, stratum or leap status in %q", out)
	}
	return tr, nil
}

// selectedSource returns the name of the source `chronyc -n sources` marks "^*" (a server,
// selected for synchronisation), or "".
func selectedSource(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "^*" {
			return f[1]
		}
	}
	return ""
}

// refID is chrony's reference ID of an IPv4 source: its address in hex.
func refID(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("%02X%02X%02X%02X", b[0], b[1], b[2], b[3])
}

// checkFollows says why a node whose tracking and sources are these does not follow server, or
// returns nil when it does: server is the selected source, the clock's reference, and the
// clock is synchronised. A node that serves its own clock, follows another server or has not
// synchronised yet fails.
func checkFollows(tr Tracking, sources string, server netip.Addr) error {
	switch sel := selectedSource(sources); {
	case sel != server.String():
		return fmt.Errorf("selected source %q, want %s", sel, server)
	case tr.RefID != refID(server) || tr.RefName != server.String():
		return fmt.Errorf("reference ID %s (%s), want %s (%s)", tr.RefID, tr.RefName, refID(server), server)
	case tr.Leap != "Normal":
		return fmt.Errorf("leap status %q, want Normal", tr.Leap)
	}
	return nil
}

// FollowsTime returns the node's tracking and no error when its chronyd has synchronised to
// server (see checkFollows); otherwise the error says why not, with chronyc's output.
func (n *Node) FollowsTime(ctx context.Context, server netip.Addr) (Tracking, error) {
	if !server.Is4() {
		return Tracking{}, fmt.Errorf("vcluster: time server %v is not IPv4", server)
	}
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	tout, err := n.Run(ctx, "chronyc", "-n", "tracking")
	if err != nil {
		return Tracking{}, err
	}
	sout, err := n.Run(ctx, "chronyc", "-n", "sources")
	if err != nil {
		return Tracking{}, err
	}
	tr, err := parseTracking(string(tout))
	if err == nil {
		err = checkFollows(tr, string(sout), server)
	}
	if err != nil {
		return tr, fmt.Errorf("%s does not follow %s: %w\n%s%s", n.Name, server, err, tout, sout)
	}
	return tr, nil
}

// WaitTime polls each node until its clock follows server (FollowsTime), bounded by ctx and by
// tries polls a second apart, and fails early when a daemon of the cluster exits.
func (c *Cluster) WaitTime(ctx context.Context, server netip.Addr, tries int, nodes ...*Node) error {
	pending := nodes
	var errs []error
	for i := 0; i < tries && len(pending) > 0; i++ {
		if err := c.checkDaemons(); err != nil {
			return err
		}
		if i > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("vcluster: clocks not following %s: %w: %w", server, ctx.Err(), errors.Join(errs...))
			case <-time.After(time.Second):
			}
		}
		var left []*Node
		errs = nil
		for _, n := range pending {
			if _, err := n.FollowsTime(ctx, server); err != nil {
				left, errs = append(left, n), append(errs, err)
			}
		}
		pending = left
	}
	if len(pending) > 0 {
		return fmt.Errorf("vcluster: after %d polls: %w", tries, errors.Join(errs...))
	}
	return nil
}

// NTPClients returns the addresses chronyd on the node has answered NTP requests from, with
// how many it answered (`chronyc -n clients`).
func (n *Node) NTPClients(ctx context.Context) (map[netip.Addr]int, string, error) {
	out, err := n.Run(ctx, "chronyc", "-n", "clients")
	if err != nil {
		return nil, string(out), err
	}
	return parseClients(string(out)), string(out), nil
}

// parseClients reads `chronyc -n clients`: an address, then the number of NTP requests.
func parseClients(out string) map[netip.Addr]int {
	clients := map[netip.Addr]int{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		a, err1 := netip.ParseAddr(f[0])
		ntp, err2 := strconv.Atoi(f[1])
		if err1 == nil && err2 == nil {
			clients[a] = ntp
		}
	}
	return clients
}
