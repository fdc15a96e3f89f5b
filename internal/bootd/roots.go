package bootd

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"time"

	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/inventory"
)

// rootBook keeps each node's last root report in memory: a restarted bootd learns them again as
// nodes boot (the figures describe one boot, not the node).
type rootBook struct {
	mu sync.Mutex
	m  map[string]ctl.Root
}

func (b *rootBook) record(node string, r ctl.Root) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]ctl.Root{}
	}
	b.m[node] = r
}

func (b *rootBook) snapshot() map[string]ctl.Root {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.m)
}

// rootReports adapts the book to httpd.Roots: a report counts only from a node's static address.
type rootReports struct{ d *daemon }

func (r rootReports) Root(from netip.Addr, rep httpd.RootReport) (string, error) {
	n, err := r.d.inv.NodeByAddress(from)
	if errors.Is(err, inventory.ErrNotFound) {
		return "", fmt.Errorf("no node has address %s: %w", from, httpd.ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	r.d.roots.record(n.Name, ctl.Root{Source: rep.Source, Storage: rep.Storage, Size: rep.Size, FromBootd: rep.FromBootd,
		FromPeers: rep.FromPeers, FromSeeds: rep.FromSeeds, PeersDropped: rep.PeersDropped, Seconds: rep.Seconds, At: time.Now()})
	return n.Name, nil
}
