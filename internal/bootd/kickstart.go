package bootd

import (
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/kickstart"
	kickstartfs "github.com/labcluster/gpucluster/kickstart"
)

// Kickstart completes the image's kickstart (install.ks, written by imgbuild) with the node's
// own part: its static network, hostname and bootd. It holds no secret, so the node's address
// is identification enough. The image's part streams from its file.
func (n nodes) Kickstart(from netip.Addr) (string, io.ReadCloser, error) {
	node, err := n.d.inv.NodeByAddress(from)
	if err != nil {
		return "", nil, fmt.Errorf("no node has address %s: %w", from, httpd.ErrForbidden)
	}
	t, err := n.d.target(node)
	if err != nil {
		return "", nil, err
	}
	body, err := n.d.imageFile(t.Image, t.Version, "install.ks")
	if err != nil {
		return "", nil, err
	}
	mask, _ := netip.AddrFromSlice(n.d.cfg.Netmask())
	ks, err := kickstart.NodeReader(body, kickstart.NodeInfo{Name: node.Name, Role: node.Role, Address: node.Address, Netmask: mask,
		Gateway: n.d.cfg.Network.Gateway, DNS: n.d.cfg.Network.DNS, Domain: n.d.cfg.Network.Domain, MAC: node.MAC,
		BootdURL: n.d.baseURL()}, kickstartfs.FS)
	if err != nil {
		body.Close()
		return "", nil, err
	}
	return node.Name, readCloser{ks, body}, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// imageFile opens a file of a verified image version.
func (d *daemon) imageFile(image, version, file string) (io.ReadCloser, error) {
	f, _, err := d.images.Open(image, version, file)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, fmt.Errorf("image %s/%s has no %s (built before imgbuild wrote kickstarts?): %w", image, version, file, httpd.ErrNotFound)
	}
	return f, err
}
