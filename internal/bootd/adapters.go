package bootd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/dhcpd"
	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/nodetpm"
	"github.com/labcluster/gpucluster/internal/power"
)

// leaser gives DHCP a node's static address, or a discovery lease for an unknown PXE client.
type leaser struct{ d *daemon }

// Lease also counts a netbooting client as booting until its first HTTP request: image
// downloads yield the CPU to it meanwhile (httpd's BootPhase).
func (l leaser) Lease(mac net.HardwareAddr, pxe, bind bool) (dhcpd.Lease, bool, error) {
	lease, ok, err := l.lease(mac, pxe, bind)
	if pxe && ok { // ok is false with every error
		l.d.booting.Leased(lease.IP)
	}
	return lease, ok, err
}

// lease is Lease without the bookkeeping: the inventory's answer.
func (l leaser) lease(mac net.HardwareAddr, pxe, bind bool) (dhcpd.Lease, bool, error) {
	if n, err := l.d.inv.NodeByMAC(mac.String()); err == nil {
		if bind {
			l.d.stages.set(n.Name, "DHCP lease")
		}
		return dhcpd.Lease{IP: n.Address, Hostname: n.Name, Duration: l.d.cfg.Network.LeaseTime}, true, nil
	}
	if !pxe {
		return dhcpd.Lease{}, false, nil
	}
	unlock := l.d.leasing.lock(mac.String())
	defer unlock()
	var lease inventory.Lease
	var err error
	if bind {
		lease, err = l.d.bindLease(mac.String())
	} else {
		lease, err = l.d.offerLease(mac.String())
	}
	if errors.Is(err, inventory.ErrNoLease) {
		return dhcpd.Lease{}, false, fmt.Errorf("%w: %w", dhcpd.ErrNoLease, err)
	}
	if err != nil {
		return dhcpd.Lease{}, false, err
	}
	return dhcpd.Lease{IP: lease.Address, Duration: l.d.cfg.Discovery.LeaseTime}, true, nil
}

// bindLease binds mac's discovery lease for a REQUEST, once the re-probe of its offered address
// (if one is in flight) is done: when that found a squatter, the address is no longer mac's and
// the REQUEST gets a NAK. A MAC holding no lease gets inventory.ErrNoLease: only a DISCOVER
// allocates, so REQUESTs from made-up MACs take no address and cause no write.
func (d *daemon) bindLease(mac string) (inventory.Lease, error) {
	if d.scout != nil {
		d.scout.awaitConfirm(mac)
	}
	return d.inv.BindLease(mac, d.pool())
}

// Prober finds hosts that already use addresses on the segment (internal/arpprobe): one address,
// many at once, or every ARP packet's sender as it passes.
type Prober interface {
	Probe(ctx context.Context, a netip.Addr, timeout time.Duration) (net.HardwareAddr, error)
	Reprobe(ctx context.Context, a netip.Addr, timeout time.Duration) (net.HardwareAddr, error) // one packet: for a swept address
	Sweep(ctx context.Context, addrs []netip.Addr, timeout time.Duration) (map[netip.Addr]net.HardwareAddr, error)
	Watch(ctx context.Context, seen func(netip.Addr, net.HardwareAddr)) error
}

const (
	// offerHold is how long an offered discovery address stays taken before its REQUEST: PXE ROMs
	// REQUEST within a few seconds (some collect offers for up to 4 s first). A DISCOVER flood
	// from random MACs then holds the pool for this long, not a lease time.
	offerHold = 10 * time.Second
	// probeTimeout is how long a new discovery address is probed before it is offered: a host on
	// the same switch answers ARP in well under a millisecond, and a PXE ROM waits seconds for an offer.
	probeTimeout = 300 * time.Millisecond
	// maxProbes bounds the addresses tried for one request, and so its delay; the next request
	// goes on from there, since every address found in use is held back.
	maxProbes = 3
)

// offerLease returns mac's discovery lease for an OFFER, allocating one when mac holds none. A
// newly allocated address is probed with ARP (RFC 5227): when another host answers at it, that
// host is named in the log, the address is held back like a declined one, and the next free
// address is tried. Renewals are not probed: the client itself may answer at its address.
//
// The inventory prefers an address the scout vouches for (swept free within scoutFresh, no ARP
// from it since). Such an address is offered at once, and re-probed while the OFFER travels
// (confirmTimeout); mac's next request (its REQUEST) waits for that re-probe. Without a vouched
// address (no scout, or none free), the new address gets the full probe (probeTimeout) first.
func (d *daemon) offerLease(mac string) (inventory.Lease, error) {
	var prefer func(netip.Addr) bool
	if d.scout != nil {
		d.scout.awaitConfirm(mac)
		prefer = d.scout.vouches
	}
	for range maxProbes {
		lease, fresh, vouched, err := d.inv.OfferLease(mac, d.pool(), prefer)
		if err != nil || !fresh || d.probe == nil {
			return lease, err
		}
		if d.scout != nil {
			d.scout.took(lease.Address)
			if vouched {
				d.scout.confirmLater(mac, lease.Address)
				return lease, nil
			}
		}
		squatter, err := d.probe.Probe(context.Background(), lease.Address, probeTimeout)
		if err != nil {
			// Fail open: an unprobed offer is what bootd did before probing existed, and a client
			// that finds the address in use still declines it.
			d.log.WithError(err).WithField("address", lease.Address).Warn("discovery address offered without an ARP probe")
			return lease, nil
		}
		if squatter == nil {
			return lease, nil
		}
		h, err := d.inv.HoldAddress(mac, lease.Address, squatter.String(), d.cfg.Discovery.LeaseTime)
		if err != nil {
			return inventory.Lease{}, err
		}
		if d.overShare(squatter, lease.Address, h) { // its answer counts for nothing
			return lease, nil
		}
		d.logSquatter(lease.Address, squatter, mac)
	}
	return inventory.Lease{}, fmt.Errorf("%d discovery addresses in a row answer ARP already (held back, see above): no lease for %s this time", maxProbes, mac)
}

// logSquatter names a host found answering at a pool address it has no lease for (clientMAC: the
// client the address was meant for, "" when the scout found it ahead of time).
func (d *daemon) logSquatter(a netip.Addr, squatter net.HardwareAddr, clientMAC string) {
	f := map[string]any{"address": a, "squatter_mac": squatter.String()}
	if clientMAC != "" {
		f["client_mac"] = clientMAC
	}
	d.log.WithFields(f).Errorf("ADDRESS IN USE: %s in the discovery pool answers ARP from %s, which has no lease for it; the address is held back like a declined one and the client gets another; find that host and remove its static address, or move the pool",
		a, squatter)
}

// Release ends mac's discovery lease on a. A decline holds a back on mac's account, or frees it
// when mac is over its share (inventory.MaxHoldsPerMAC).
func (l leaser) Release(mac net.HardwareAddr, a netip.Addr, declined bool) {
	d := l.d
	if n, err := d.inv.NodeByMAC(mac.String()); err == nil {
		if declined && a == n.Address {
			d.remote.Log(d.log.WithFields(logrus.Fields{"node": n.Name, "address": n.Address, "mac": n.MAC}), logrus.ErrorLevel,
				"node declined its address: another host on the segment uses it; find and remove that host")
		}
		return
	}
	h, err := d.inv.ReleaseLease(mac.String(), a, declined, d.cfg.Discovery.LeaseTime)
	if h == inventory.Held {
		d.log.WithFields(logrus.Fields{"mac": mac.String(), "address": a}).Info("client declined its address (another host uses it): held back")
	}
	d.overShare(mac, a, h)
	if err != nil && !errors.Is(err, inventory.ErrNotFound) {
		d.log.WithError(err).WithField("mac", mac.String()).Error("release lease")
	}
}

// overShare reports whether a hold of a on who's account (a host found answering ARP at it, or
// the client declining it) was refused because who is over its share, and logs that (rate-limited:
// any host can make it happen at will).
func (d *daemon) overShare(who net.HardwareAddr, a netip.Addr, h inventory.Hold) bool {
	if h != inventory.OverShare {
		return false
	}
	d.remote.Log(d.log.WithFields(logrus.Fields{"mac": who.String(), "address": a, "held_back_already": inventory.MaxHoldsPerMAC}), logrus.ErrorLevel,
		"a MAC has the most discovery addresses held back on its account already (answering ARP at them, or declining them): proxy ARP on a router, or someone spoofing; no more are held for it (clients get such addresses, and decline them if they are really in use); find that device")
	return true
}

func (d *daemon) pool() inventory.Pool {
	return inventory.Pool{Start: d.cfg.Discovery.PoolStart, End: d.cfg.Discovery.PoolEnd, LeaseTime: d.cfg.Discovery.LeaseTime, OfferHold: offerHold}
}

// machines gives HTTP the inventory's view of a machine and what it boots.
type machines struct{ d *daemon }

func (m machines) Boot(mac net.HardwareAddr, from netip.Addr, f httpd.Facts) (httpd.Target, bool, error) {
	if err := m.d.checkSource(mac.String(), from); err != nil {
		return httpd.Target{}, false, err
	}
	n, ok, err := m.d.inv.See(mac.String(), inventory.Facts(f))
	if err != nil || !ok {
		return httpd.Target{}, ok, err
	}
	t, err := m.d.target(n)
	if err != nil {
		return httpd.Target{}, false, err
	}
	if _, err := m.d.inv.SetState(n.Name, inventory.StateBooting); err != nil {
		return httpd.Target{}, false, err
	}
	m.d.stages.booted(n.Name, t.Image, t.Version)
	m.d.metrics.BootScript(t.Role, t.Image, t.Version)
	return t, true, nil
}

func (m machines) Inventory() any { return m.d.nodesReply() }

// checkSource accepts a machine's request only from an address bootd gave that MAC: its node
// address, or its discovery lease, which the request renews (iPXE never renews a DHCP lease
// itself, so a machine waiting for hours keeps its address this way). Anyone on the segment can
// claim any MAC in a URL; this ties the claim to DHCP, and bounds the waiting list by the pool.
func (d *daemon) checkSource(mac string, from netip.Addr) error {
	if n, err := d.inv.NodeByMAC(mac); err == nil && n.Address == from {
		return nil
	}
	l, err := d.inv.LeaseOf(mac)
	if err != nil || l.Address != from {
		return fmt.Errorf("machine %s asked from %s, which bootd did not lease to it: %w", mac, from, httpd.ErrForbidden)
	}
	// Renews only: a lease pruned since LeaseOf, or outside a pool narrowed since, is not made anew.
	if _, err = d.inv.BindLease(mac, d.pool()); errors.Is(err, inventory.ErrNoLease) {
		return fmt.Errorf("machine %s asked from %s, which is no discovery lease of it any more: %w", mac, from, httpd.ErrForbidden)
	}
	return err
}

// target is what node n boots: its stored address (the one DHCP hands out too) and the newest
// verified version of its role's image, or the pinned one.
func (d *daemon) target(n inventory.Node) (httpd.Target, error) {
	p, err := d.cfg.Place(n.Name)
	if err != nil {
		return httpd.Target{}, fmt.Errorf("node %s: %w", n.Name, err)
	}
	img, err := d.images.Resolve(p.Image, p.Version)
	if err != nil {
		return httpd.Target{}, fmt.Errorf("node %s waits for a bootable %q image: %w", n.Name, p.Image, err)
	}
	mac, _ := net.ParseMAC(n.MAC)
	m := img.Manifest
	t := httpd.Target{Name: n.Name, Role: p.Role, Address: n.Address, MAC: mac, Image: m.Name, Version: m.Version,
		Kernel: m.Kernel.File, Initrds: m.Initrds, Cmdline: m.Cmdline}
	if m.Rootfs != nil {
		t.Rootfs, t.RootfsSHA256 = m.Rootfs.File, m.Files[m.Rootfs.File].SHA256
		t.WritableArgs = d.cfg.NodeKernelArgs(n.Name, p.Role)
		if m.Rootfs.Index != "" {
			t.RootfsIndex, t.RootfsIndexSHA256 = m.Rootfs.Index, m.Files[m.Rootfs.Index].SHA256
		}
	}
	return t, nil
}

// files gives HTTP the verified image files and the iPXE binaries.
type files struct{ d *daemon }

func (f files) OpenImageFile(image, version, file string) (*os.File, error) {
	fh, _, err := f.d.images.Open(image, version, file)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", httpd.ErrNotFound, err)
	}
	return fh, err
}

func (f files) OpenChunk(prefix, name string) (*os.File, error) {
	fh, err := artifact.OpenChunk(f.d.cfg.ImagesDir, prefix, name)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", httpd.ErrNotFound, err)
	}
	return fh, err
}

func (f files) OpenFetchInitrd() (*os.File, error) {
	if f.d.fetchInitrd == "" {
		return nil, fmt.Errorf("no fetch program: %w", httpd.ErrNotFound)
	}
	return os.Open(f.d.fetchInitrd)
}

func (f files) OpenLoader(name string) (*os.File, error) {
	fh, err := f.d.tftp.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", httpd.ErrNotFound, err)
	}
	return fh, nil
}

// controller carries out the CLI's requests: the name decides role and address.
type controller struct{ d *daemon }

func (c controller) Nodes() ctl.NodesReply { return c.d.nodesReply() }

func (c controller) Assign(r ctl.AssignRequest) (inventory.Assignment, error) {
	p, err := c.d.cfg.Place(r.Name)
	if err != nil {
		return inventory.Assignment{}, ctl.Invalid(err)
	}
	if r.MAC != "" {
		if _, err := inventory.NormalizeMAC(r.MAC); err != nil {
			return inventory.Assignment{}, ctl.Invalid(err)
		}
	}
	req := inventory.AssignRequest{Name: p.Name, Role: p.Role, Address: p.Address, MAC: r.MAC, Replace: r.Replace}
	if r.EK != nil {
		ek, err := nodetpm.ParseEKFile(r.EK)
		if err != nil {
			return inventory.Assignment{}, ctl.Invalid(fmt.Errorf("TPM endorsement key: %w", err))
		}
		t := inventory.NewTPM(ek.DER, true, time.Now())
		req.TPM = &t
	}
	c.d.identity.Lock()
	defer c.d.identity.Unlock()
	a, err := c.d.inv.Assign(req)
	if err != nil {
		return a, err
	}
	// A name moved to other hardware (--replace) needs no Forget here: its keys belong to the old
	// holder, and the first render after the move revokes them (secrets.Store.HostKeys).
	fields := map[string]any{"node": a.Name, "mac": a.MAC, "address": a.Address, "role": a.Role}
	if a.Replaced != nil {
		fields["replaces"] = a.Replaced.MAC // forgotten: netbooted again, it waits to be named
	}
	if req.TPM != nil {
		fields["tpm_ek_sha256"] = req.TPM.EKSHA256
	}
	c.d.log.WithFields(fields).Info("machine assigned")
	return a, nil
}

func (c controller) Unassign(name string) (inventory.Node, error) {
	c.d.identity.Lock()
	defer c.d.identity.Unlock()
	n, err := c.d.inv.Unassign(name)
	if err == nil {
		c.d.stages.forget(name)
		c.d.log.WithFields(map[string]any{"node": n.Name, "mac": n.MAC}).Info("node unassigned")
		c.d.forgetHostKeys(name)
	}
	return n, err
}

// forgetHostKeys revokes and drops the SSH host keys of a name no machine holds any more: the
// old machine holds the private keys, and no render would revoke them (an unassigned name is not
// rendered). Should this fail, or bootd stop before it, the next start forgets them
// (secrets.Store.Prune), and a later holder never gets them (see holder).
func (d *daemon) forgetHostKeys(name string) {
	if err := d.secrets.Forget(name); err != nil {
		d.log.WithError(err).WithField("node", name).Error("old host keys of the node not revoked yet: the next machine to carry the name, or bootd's next start, revokes them (do not delete them by hand: that would skip the revocation)")
		return
	}
	if err := d.inv.Forgotten(name); err != nil {
		d.log.WithError(err).WithField("node", name).Warn("the inventory still lists the node as released: bootd's next start forgets its (already revoked) host keys again, harmlessly")
	}
}

func (c controller) Power(ctx context.Context, r ctl.PowerRequest) (ctl.PowerReply, error) {
	a, err := power.ParseAction(r.Action)
	if err != nil {
		return ctl.PowerReply{}, ctl.Invalid(err)
	}
	rs, err := c.d.switchPower(ctx, a, r.Nodes, "bootd power")
	return ctl.PowerReply{Results: rs}, err
}

func (c controller) SetBMCPassword(r ctl.BMCPasswordRequest) error { return c.d.setBMCPassword(r) }

func (c controller) Names() ctl.Names { return c.d.names() }

func (d *daemon) nodesReply() ctl.NodesReply {
	nodes, waiting := d.inv.Snapshot()
	r := ctl.NodesReply{Nodes: nodes, Waiting: waiting, Leases: d.inv.Leases(),
		Server: ctl.ServerInfo{Interface: d.cfg.Interface, Address: d.server, Started: d.started},
		Power:  d.powered.snapshot(), Roots: d.roots.snapshot()}
	if d.loaders != nil {
		r.NotStarted = d.loaders.NotStarted(func(mac string) string {
			if n, err := d.inv.NodeByMAC(mac); err == nil {
				return n.Name
			}
			return ""
		})
	}
	return r
}

// loaderSent hears of a loader TFTP sent whole to address a: the PC holding a (as a node, or by
// its discovery lease) fetched it.
func (d *daemon) loaderSent(a netip.Addr, file string) {
	mac := ""
	if n, err := d.inv.NodeByAddress(a); err == nil {
		mac = n.MAC
	} else {
		for _, l := range d.inv.Leases() {
			if l.Address == a && !l.Declined {
				mac = l.MAC
			}
		}
	}
	if hw, err := net.ParseMAC(mac); err == nil {
		d.loaders.Sent(hw, file)
	}
}
