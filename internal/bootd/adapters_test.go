package bootd

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/bootphase"
	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/dhcpd"
	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/metrics"
	"github.com/labcluster/gpucluster/internal/ratelog"
	"github.com/labcluster/gpucluster/overlays"
)

func testDaemon(t *testing.T) *daemon {
	t.Helper()
	return daemonOn(t, t.TempDir())
}

// daemonOn is a daemon on state directory state, opened as bootd opens it at start (openState):
// a second call on the same directory is bootd after a restart.
func daemonOn(t *testing.T, state string) *daemon {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	inv, sec, err := openState(state, StartOptions{}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inv.Compact() }) // OFFERs' background writes end before state is removed
	d := &daemon{cfg: config.Default(), server: netip.MustParseAddr("10.80.0.1"), inv: inv, images: artifact.NewCatalog(t.TempDir(), log), log: log,
		started: time.Now(), secrets: sec, templates: overlays.FS, remote: ratelog.New(ratelog.Every),
		booting: bootphase.New(bootphase.DefaultPatience), stages: newStages()}
	d.roleImages = newRoleImages(d)
	d.metrics = metrics.New(d.census)
	return d
}

func hw(s string) net.HardwareAddr {
	m, _ := net.ParseMAC(s)
	return m
}

// dora looks mac's lease up as a DHCP client gets it: DISCOVER (the OFFER's lookup), then
// REQUEST (bound), whose answer it returns; or the DISCOVER's when that found nothing.
func dora(d *daemon, mac net.HardwareAddr, pxe bool) (dhcpd.Lease, bool, error) {
	if l, ok, err := (leaser{d}).Lease(mac, pxe, false); err != nil || !ok {
		return l, ok, err
	}
	return leaser{d}.Lease(mac, pxe, true)
}

func TestLeaser(t *testing.T) {
	d := testDaemon(t)
	if _, _, err := d.inv.See("52:54:00:00:00:04", inventory.Facts{}); err != nil {
		t.Fatal(err)
	}
	if _, err := (controller{d}).Assign(ctl.AssignRequest{Name: "c4"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		mac      string
		pxe      bool
		wantOK   bool
		wantIP   string
		wantHost string
		// booting: the machine now counts as netbooting until it asks HTTP (downloads yield)
		booting bool
	}{
		{"assigned node gets its reservation", "52:54:00:00:00:04", false, true, "10.80.0.104", "c4", false},
		{"assigned node, PXE too", "52:54:00:00:00:04", true, true, "10.80.0.104", "c4", true},
		{"unknown PXE client gets the pool", "52:54:00:00:00:09", true, true, "10.80.0.200", "", true},
		{"unknown non-PXE machine gets nothing", "52:54:00:00:00:0a", false, false, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d.booting = bootphase.New(bootphase.DefaultPatience)
			l, ok, err := dora(d, hw(tt.mac), tt.pxe)
			if err != nil || ok != tt.wantOK {
				t.Fatalf("Lease = %+v, %v, %v; want ok=%v", l, ok, err, tt.wantOK)
			}
			if ok && (l.IP.String() != tt.wantIP || l.Hostname != tt.wantHost) {
				t.Fatalf("Lease = %s %q, want %s %q", l.IP, l.Hostname, tt.wantIP, tt.wantHost)
			}
			if got := d.booting.Booting(); got != tt.booting {
				t.Fatalf("counts as booting: %v, want %v", got, tt.booting)
			}
			if !ok {
				return
			}
			d.booting.Asked(netip.MustParseAddr(tt.wantIP)) // as httpd reports a request from there
			if d.booting.Booting() {
				t.Fatalf("still booting after a request from its address %s", tt.wantIP)
			}
		})
	}
	t.Run("PXE REQUEST without a lease (NAK)", func(t *testing.T) {
		d.booting = bootphase.New(bootphase.DefaultPatience)
		if _, _, err := (leaser{d}).Lease(hw("52:54:00:00:00:0b"), true, true); !errors.Is(err, dhcpd.ErrNoLease) {
			t.Fatalf("Lease = %v, want ErrNoLease", err)
		}
		if d.booting.Booting() {
			t.Fatal("a client NAKed counts as booting")
		}
	})
}

func TestControllerAssign(t *testing.T) {
	tests := []struct {
		name     string
		req      ctl.AssignRequest
		wantRole string
		wantAddr string
		wantErr  string
	}{
		{"master", ctl.AssignRequest{Name: "master"}, "master", "10.80.0.100", ""},
		{"compute", ctl.AssignRequest{Name: "c7"}, "compute", "10.80.0.107", ""},
		{"name fitting no role", ctl.AssignRequest{Name: "gpu1"}, "", "", "fits no role"},
		{"compute out of range", ctl.AssignRequest{Name: "c100"}, "", "", "fits no role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := testDaemon(t)
			if _, _, err := d.inv.See("52:54:00:00:00:01", inventory.Facts{}); err != nil {
				t.Fatal(err)
			}
			n, err := controller{d}.Assign(tt.req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, config.ErrNoRole) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || n.Role != tt.wantRole || n.Address.String() != tt.wantAddr {
				t.Fatalf("node = %+v, %v; want %s at %s", n, err, tt.wantRole, tt.wantAddr)
			}
		})
	}
}

func TestBootWithoutImageExplains(t *testing.T) {
	d := testDaemon(t)
	if _, _, err := d.inv.See("52:54:00:00:00:04", inventory.Facts{}); err != nil {
		t.Fatal(err)
	}
	if _, err := (controller{d}).Assign(ctl.AssignRequest{Name: "c4"}); err != nil {
		t.Fatal(err)
	}
	_, _, err := machines{d}.Boot(hw("52:54:00:00:00:04"), netip.MustParseAddr("10.80.0.104"), httpd.Facts{})
	if err == nil || !strings.Contains(err.Error(), `c4 waits for a bootable "compute" image`) {
		t.Fatalf("err = %v, want an explanation naming the node and image", err)
	}
}

func TestMachineRequestsComeFromTheirAddress(t *testing.T) {
	d := testDaemon(t)
	if _, _, err := d.inv.See("52:54:00:00:00:04", inventory.Facts{}); err != nil {
		t.Fatal(err)
	}
	if _, err := (controller{d}).Assign(ctl.AssignRequest{Name: "c4"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dora(d, hw("52:54:00:00:00:09"), true); err != nil { // 10.80.0.200
		t.Fatal(err)
	}
	tests := []struct {
		name, mac, from string
		forbidden       bool
	}{
		{"node from its address", "52:54:00:00:00:04", "10.80.0.104", false},
		{"node from elsewhere", "52:54:00:00:00:04", "10.80.0.200", true},
		{"waiting machine from its lease", "52:54:00:00:00:09", "10.80.0.200", false},
		{"waiting machine from another address", "52:54:00:00:00:09", "10.80.0.201", true},
		{"MAC bootd never leased", "52:54:00:00:00:77", "10.80.0.200", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := machines{d}.Boot(hw(tt.mac), netip.MustParseAddr(tt.from), httpd.Facts{})
			if got := errors.Is(err, httpd.ErrForbidden); got != tt.forbidden {
				t.Fatalf("forbidden = %v (%v), want %v", got, err, tt.forbidden)
			}
		})
	}
}

// A name that leaves its machine (unassign, or --replace to other hardware) loses its SSH host
// keys: the old machine held the private halves. Reassigning the same machine keeps them.
func TestHostKeysFollowTheMachine(t *testing.T) {
	d := testDaemon(t)
	key := func() string {
		t.Helper()
		k, err := d.secrets.HostKeys("c4", holders(d.inv)["c4"])
		if err != nil || len(k) == 0 {
			t.Fatalf("host keys of c4: %v %v", k, err)
		}
		return k[0].Public
	}
	assign := func(mac string, replace bool) {
		t.Helper()
		if _, _, err := d.inv.See(mac, inventory.Facts{}); err != nil {
			t.Fatal(err)
		}
		if _, err := (controller{d}).Assign(ctl.AssignRequest{Name: "c4", MAC: mac, Replace: replace}); err != nil {
			t.Fatal(err)
		}
	}
	assign("52:54:00:00:00:04", false)
	first := key()
	if key() != first {
		t.Fatal("host keys changed without a reassignment")
	}
	assign("52:54:00:00:00:05", true) // new hardware
	second := key()
	if second == first {
		t.Fatal("c4 kept its host keys on new hardware")
	}
	if _, err := (controller{d}).Unassign("c4"); err != nil {
		t.Fatal(err)
	}
	if key() == second {
		t.Fatal("c4 kept its host keys after unassign")
	}
}
