package bootd

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/inventory"
)

// peerBook adapts the peer registry to httpd.Peers: only nodes (known by their static address)
// may announce, so a stranger on the segment cannot put itself in the lists. A node that does
// and then lies only costs the others a request: every chunk is checked, and a liar is dropped.
type peerBook struct{ d *daemon }

func (p peerBook) Announce(from netip.Addr, index string, port uint16) (string, error) {
	n, err := p.d.inv.NodeByAddress(from)
	if err != nil {
		if errors.Is(err, inventory.ErrNotFound) {
			return "", fmt.Errorf("no node has address %s: %w", from, httpd.ErrNotFound)
		}
		return "", err
	}
	p.d.peers.Announce(index, from, port)
	return n.Name, nil
}

func (p peerBook) List(index string, from netip.Addr) []string {
	var out []string
	for _, ap := range p.d.peers.List(index, from) {
		out = append(out, "http://"+ap.String()+"/chunks/")
	}
	return out
}
