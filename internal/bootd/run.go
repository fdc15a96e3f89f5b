package bootd

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/dhcpd"
	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/tftpd"
)

// daemon holds what the adapters share.
type daemon struct {
	cfg     config.Config
	server  netip.Addr
	inv     *inventory.Store
	images  *artifact.Catalog
	tftp    *tftpd.Server
	log     logrus.FieldLogger
	started time.Time
}

// Run serves until ctx is done or a listener fails.
func Run(ctx context.Context, cfg config.Config, log logrus.FieldLogger) error {
	d, err := setup(cfg, log)
	if err != nil {
		return err
	}
	d.logStart()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return d.serveDHCP(ctx) })
	g.Go(func() error { return d.tftp.Serve(ctx, d.hostPort(cfg.Ports.TFTP)) })
	g.Go(func() error { return d.serveHTTP(ctx) })
	g.Go(func() error { return ctl.Serve(ctx, d.socketPath(), controller{d}) })
	return g.Wait()
}

// setup checks everything that can be wrong before any listener opens, so a bad config or a
// missing interface stops bootd with one clear message.
func setup(cfg config.Config, log logrus.FieldLogger) (*daemon, error) {
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
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	inv, err := inventory.Open(filepath.Join(cfg.StateDir, "inventory.json"))
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
	return &daemon{cfg: cfg, server: server, inv: inv, images: artifact.NewCatalog(cfg.ImagesDir, log.WithField("part", "images")),
		tftp: tftp, log: log, started: time.Now()}, nil
}

func (d *daemon) logStart() {
	nodes, waiting := d.inv.Snapshot()
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

func (d *daemon) serveDHCP(ctx context.Context) error {
	h := dhcpd.NewHandler(dhcpd.Options{
		ServerIP: d.server, Subnet: d.cfg.Network.Subnet, Router: d.cfg.Network.Gateway,
		DNS: d.cfg.Network.DNS, Domain: d.cfg.Network.Domain, HTTPBase: d.baseURL(),
	}, leaser{d}, d.log.WithField("listener", "dhcp"))
	return h.Serve(ctx, d.cfg.Interface, d.cfg.Ports.DHCP)
}

func (d *daemon) serveHTTP(ctx context.Context) error {
	ln, err := ListenTCP(ctx, d.cfg.Interface, d.hostPort(d.cfg.Ports.HTTP))
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	mask, _ := netip.AddrFromSlice(d.cfg.Netmask())
	srv := httpd.New(httpd.Options{BaseURL: d.baseURL(), Netmask: mask, Gateway: d.cfg.Network.Gateway},
		machines{d}, files{d}, d.log.WithField("listener", "http"))
	return srv.Serve(ctx, ln)
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
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = syscall.BindToDevice(int(fd), ifname) }); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(ctx, "tcp4", addr)
}
