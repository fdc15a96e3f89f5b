package bootd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"

	"github.com/labcluster/gpucluster/internal/arpprobe"
	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/bootphase"
	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/dhcpd"
	"github.com/labcluster/gpucluster/internal/fetchinitrd"
	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/labview"
	"github.com/labcluster/gpucluster/internal/logfield"
	"github.com/labcluster/gpucluster/internal/metrics"
	"github.com/labcluster/gpucluster/internal/neigh"
	"github.com/labcluster/gpucluster/internal/peers"
	"github.com/labcluster/gpucluster/internal/power"
	"github.com/labcluster/gpucluster/internal/ratelog"
	"github.com/labcluster/gpucluster/internal/secrets"
	"github.com/labcluster/gpucluster/internal/tftpd"
	"github.com/labcluster/gpucluster/overlays"
)

// daemon holds what the adapters share.
type daemon struct {
	cfg     config.Config
	server  netip.Addr
	inv     *inventory.Store
	images  *artifact.Catalog
	tftp    *tftpd.Server // the iPXE directory, checked once: served by a TFTP worker, and for UEFI HTTP boot
	log     logrus.FieldLogger
	started time.Time
	// neighbourMAC reads the neighbour table (a variable for tests).
	neighbourMAC func(netip.Addr) (string, error)
	secrets      *secrets.Store
	templates    fs.FS // overlays/, embedded in the binary
	// probe checks a new discovery address on the segment before it is offered (nil: unprobed);
	// leasing keeps it to one lookup per MAC at a time.
	probe   Prober
	leasing macLocks
	// scout probes free discovery addresses ahead of time (nil: every new address waits for its probe).
	scout *scout
	// remote rate-limits the errors a host on the segment can cause at will (a MAC over its
	// share of held-back addresses, a node declining its address).
	remote *ratelog.Limiter
	// identity orders moving a name to another machine (assign, unassign: write-locked; unassign
	// forgets the host keys, a replace leaves them to the next render) against acting on a node's
	// identity (its overlay, its hardware report: read-locked from identify to the end), so a
	// request that identified the old machine never gets the new one's keys or writes the new
	// one's record.
	identity sync.RWMutex
	// booting holds the netbooting machines between their lease and their first HTTP request.
	booting *bootphase.Tracker
	// power switches nodes (BMCs, Wake-on-LAN); powered is what bootd last learned of each.
	power   *power.Switch
	powered powerBook
	// checking is held while a `bootd check` runs: one at a time.
	checking sync.Mutex
	// metrics are bootd's own, at /metrics; stages and roleImages feed the lab's page.
	metrics    *metrics.Metrics
	stages     *stages
	roleImages *roleImages
	// loaders picks UEFI loaders and keeps which PCs never started theirs (loaders.go).
	loaders *loaderWatch
	// peers knows which nodes serve which root index's chunks; fetchInitrd is the initrd carrying
	// bootd-fetch ("" when there is none: nodes fetch their root whole).
	peers       *peers.Registry
	fetchInitrd string
	// roots is each node's report on its root at its last boot (bootd nodes' ROOT).
	roots rootBook
}

// Run serves until ctx is done or a listener fails.
func Run(ctx context.Context, cfg config.Config, o StartOptions, log logrus.FieldLogger) error {
	d, err := setup(cfg, o, log)
	if err != nil {
		return err
	}
	tftpConn, httpLn, err := d.listen(ctx)
	if err != nil {
		return err
	}
	d.logStart()
	g, ctx := errgroup.WithContext(ctx)
	if d.scout != nil {
		// The first sweep before any listener opens: from the first DISCOVER on, new clients get
		// addresses already probed, and a squatter is in the log before anyone boots.
		start := time.Now()
		n := d.scout.round(ctx)
		d.log.WithFields(logrus.Fields{"addresses": n, "duration": logfield.Duration(time.Since(start))}).Info("discovery pool swept with ARP")
		g.Go(func() error { d.scout.run(ctx); return nil })
	}
	g.Go(func() error { return d.serveDHCP(ctx) })
	g.Go(func() error { return d.serveTFTP(ctx, tftpConn) })
	g.Go(func() error { return d.serveHTTP(ctx, httpLn) })
	g.Go(func() error { return ctl.Serve(ctx, d.socketPath(), controller{d}) })
	g.Go(func() error { d.pollPower(ctx); return nil })
	err = g.Wait()
	d.stop()
	return err
}

// stop finishes off once every listener and the scout's run have returned: it waits for the
// scout's goroutines still going (re-probes, sightings), then writes the counts the rate limiter
// holds back (nothing logs through it any more), then folds the journal into the inventory file
// (nothing writes holds to it any more).
func (d *daemon) stop() {
	if d.scout != nil {
		d.scout.wait()
	}
	d.remote.Flush()
	if err := d.inv.Compact(); err != nil {
		d.log.WithError(err).Warn("inventory journal not folded into the inventory file at stop; the next start reads both")
	}
}

// setup checks everything that can be wrong before any listener opens, so a bad config or a
// missing interface stops bootd with one clear message.
func setup(cfg config.Config, o StartOptions, log logrus.FieldLogger) (*daemon, error) {
	if cfg.Interface == "" {
		return nil, fmt.Errorf("no interface to serve on: give --interface (e.g. --interface eth1) or interface = \"...\" in the config file")
	}
	server, err := InterfaceAddr(cfg.Interface)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(server); err != nil {
		return nil, err
	}
	if err := lockStateDir(cfg.StateDir); err != nil {
		return nil, err
	}
	inv, sec, err := openState(cfg.StateDir, o, log)
	if err != nil {
		return nil, err
	}
	ipxeDir, err := config.FindIPXEDir(cfg.IPXEDir)
	if err != nil {
		return nil, err
	}
	tftp, err := tftpd.New(ipxeDir, log.WithField("listener", "tftp"))
	if err != nil {
		return nil, err
	}
	d := &daemon{cfg: cfg, server: server, inv: inv, images: artifact.NewCatalog(cfg.ImagesDir, log.WithField("part", "images")),
		tftp: tftp, log: log, started: time.Now(), neighbourMAC: neigh.MAC, secrets: sec, templates: overlays.FS,
		probe: arpprobe.New(cfg.Interface), remote: ratelog.New(ratelog.Every), booting: bootphase.New(bootphase.DefaultPatience),
		power:   power.NewSwitch(cfg.Interface),
		loaders: newLoaderWatch(cfg.UEFI)}
	d.scout = newScout(d)
	d.stages, d.roleImages = newStages(), newRoleImages(d)
	d.metrics = metrics.New(d.census)
	d.peers = peers.New()
	if d.fetchInitrd, err = prepareFetchInitrd(cfg, log); err != nil {
		return nil, err
	}
	return d, nil
}

// lockStateDir makes the state directory private (prepareStateDir) and takes an exclusive lock
// on it for the life of the process, before any listener opens: a second bootd on the same
// state would otherwise answer DHCP from a stale inventory and overwrite the live one.
func lockStateDir(dir string) error {
	if err := prepareStateDir(dir); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, "bootd.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return fmt.Errorf("another bootd is already running on state dir %s (it holds %s)", dir, f.Name())
	}
	return nil // f stays open: the lock lasts until the process ends
}

func (d *daemon) logStart() {
	nodes, waiting := d.inv.Snapshot()
	d.reconcile(nodes)
	d.log.WithFields(logrus.Fields{"interface": d.cfg.Interface, "address": d.server, "subnet": d.cfg.Network.Subnet,
		"nodes": len(nodes), "waiting": len(waiting), "images": d.cfg.ImagesDir}).Info("bootd serving")
	for _, role := range []struct{ image, version string }{{d.cfg.Master.Image, d.cfg.Master.Version}, {d.cfg.Compute.Image, d.cfg.Compute.Version}} {
		if img, err := d.images.Resolve(role.image, role.version); err != nil {
			d.log.WithError(err).Warnf("no bootable %q image yet: machines assigned to it will wait", role.image)
		} else {
			d.log.WithFields(logrus.Fields{"image": role.image, "version": img.Manifest.Version}).Info("image ready")
		}
	}
}

// reconcile reports nodes whose stored address no longer matches the configuration (edited
// after they were assigned). They keep their stored address, which DHCP and their boot script
// agree on, until an admin reassigns them.
func (d *daemon) reconcile(nodes []inventory.Node) {
	for _, n := range nodes {
		p, err := d.cfg.Place(n.Name)
		switch {
		case err != nil:
			d.log.WithError(err).WithField("node", n.Name).Error("node fits no role under the current configuration; it keeps booting with its stored address")
		case p.Address != n.Address:
			d.log.WithFields(logrus.Fields{"node": n.Name, "stored": n.Address, "configured": p.Address}).
				Error("node's address differs from the configuration; it keeps its stored address until you run `bootd unassign` and `bootd assign` again")
		}
	}
}

// listen binds TFTP and HTTP before anything serves: a port another program holds (another
// bootd, dnsmasq, a web server) stops bootd before its DHCP answers anyone, rather than after,
// which under systemd's Restart= would be a DHCP server coming and going every few seconds.
func (d *daemon) listen(ctx context.Context) (*net.UDPConn, net.Listener, error) {
	conn, err := ListenUDP(ctx, d.cfg.Interface, d.hostPort(d.cfg.Ports.TFTP))
	if err != nil {
		return nil, nil, fmt.Errorf("tftp: %w%s", err, portHint(err, "udp", d.cfg.Ports.TFTP))
	}
	ln, err := ListenTCP(ctx, d.cfg.Interface, d.hostPort(d.cfg.Ports.HTTP))
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("http: %w%s", err, portHint(err, "tcp", d.cfg.Ports.HTTP))
	}
	d.log.WithFields(logrus.Fields{"interface": d.cfg.Interface, "addr": ln.Addr().String()}).Info("http listening") // tftp's worker says where it listens
	return conn, ln, nil
}

// portHint says how to find who holds a port bootd could not bind.
func portHint(err error, proto string, port int) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return ""
	}
	return fmt.Sprintf(" (another program serves %s port %d: `ss -%slnp 'sport = :%d'` names it; stop it, or move bootd's port in [ports])", proto, port, proto[:1], port)
}

func (d *daemon) serveTFTP(ctx context.Context, conn *net.UDPConn) error {
	d.checkReplySource()
	d.checkReversePathFilter("/proc/sys")
	exe, err := os.Executable()
	if err != nil {
		conn.Close()
		return fmt.Errorf("tftp: find the bootd binary to run its worker: %w", err)
	}
	return tftpd.Worker{Exe: exe, Server: d.tftp, Meter: d.metrics, OnSent: d.loaderSent}.Serve(ctx, conn)
}

// checkReplySource warns when the kernel would send to the lab from another address than
// bootd's: TFTP transfers reply from a socket on the wildcard address (internal/tftpd), and a PXE
// ROM drops data from an address it did not ask. Policy routing or a route's src hint could do it.
func (d *daemon) checkReplySource() {
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(d.cfg.Discovery.PoolStart, 69))) // connect only: nothing is sent
	if err != nil {
		d.log.WithError(err).Warn("cannot check which address replies to the lab")
		return
	}
	defer c.Close()
	if src := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(); src != d.server {
		d.log.WithFields(logrus.Fields{"route_source": src, "server": d.server}).
			Warn("the kernel routes replies to the lab from another address than bootd's: PXE ROMs will drop TFTP data; check `ip route get` for the discovery pool")
	}
}

func (d *daemon) serveDHCP(ctx context.Context) error {
	h := dhcpd.NewHandler(dhcpd.Options{
		ServerIP: d.server, Subnet: d.cfg.Network.Subnet, Router: d.cfg.Network.Gateway,
		DNS: d.cfg.Network.DNS, Domain: d.cfg.Network.Domain, HTTPBase: d.baseURL(), Meter: d.metrics, Loaders: d.loaders,
	}, leaser{d}, d.log.WithField("listener", "dhcp"))
	return h.Serve(ctx, d.cfg.Interface, d.cfg.Ports.DHCP)
}

func (d *daemon) serveHTTP(ctx context.Context, ln net.Listener) error {
	mask, _ := netip.AddrFromSlice(d.cfg.Netmask())
	opts := httpd.Options{BaseURL: d.baseURL(), Netmask: mask, Gateway: d.cfg.Network.Gateway, DNS: d.cfg.Network.DNS, Phase: d.booting,
		Meter: d.metrics, Progress: progress{d}, Extra: d.views()}
	if d.fetchInitrd != "" {
		opts.FetchInitrd = fetchinitrd.Name
	}
	srv := httpd.New(opts, machines{d}, files{d}, nodes{d}, d.log.WithField("listener", "http"))
	srv.SetPeers(peerBook{d})
	srv.SetRoots(rootReports{d})
	return srv.Serve(ctx, ln)
}

// views are the read-only handlers beside the boot endpoints: the lab's page, its JSON and
// Prometheus service discovery (internal/labview), and bootd's metrics. They show what
// /api/v1/nodes already shows to the segment, and no secret (SECURITY.md).
func (d *daemon) views() map[string]http.Handler {
	routes := labview.Routes(labSource{d})
	routes["GET /metrics"] = d.metrics.Handler()
	return routes
}

func (d *daemon) hostPort(port int) string {
	return net.JoinHostPort(d.server.String(), strconv.Itoa(port))
}

func (d *daemon) baseURL() string {
	if d.cfg.Ports.HTTP == 80 {
		return "http://" + d.server.String()
	}
	return "http://" + d.hostPort(d.cfg.Ports.HTTP)
}

func (d *daemon) socketPath() string { return filepath.Join(d.cfg.StateDir, ctl.SocketName) }

// InterfaceAddr returns the IPv4 address of ifname: bootd's own address on the lab segment.
func InterfaceAddr(ifname string) (netip.Addr, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("interface %s: %w (see `ip -br addr` for the names)", ifname, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("interface %s: %w", ifname, err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			return p.Addr(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("interface %s has no IPv4 address: give it one in the lab subnet (e.g. ip addr add 10.80.0.1/24 dev %s)", ifname, ifname)
}

// ListenTCP listens on addr bound to ifname (SO_BINDTODEVICE), so bootd answers only on its
// interface even when routing would let other interfaces reach the address.
func ListenTCP(ctx context.Context, ifname, addr string) (net.Listener, error) {
	return boundTo(ifname).Listen(ctx, "tcp4", addr)
}

// ListenUDP is ListenTCP for UDP.
func ListenUDP(ctx context.Context, ifname, addr string) (*net.UDPConn, error) {
	c, err := boundTo(ifname).ListenPacket(ctx, "udp4", addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.UDPConn), nil
}

func boundTo(ifname string) *net.ListenConfig {
	return &net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = syscall.BindToDevice(int(fd), ifname) }); err != nil {
			return err
		}
		return serr
	}}
}
