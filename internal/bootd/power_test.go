package bootd

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/power"
)

// boards is a set of BMCs as power's Controller sees them, by address: what each was asked and
// with which credentials. The real protocol is tested against ipmi_sim in e2e/power_test.go.
type boards struct {
	mu    sync.Mutex
	on    map[string]bool
	asked []string // "address user password action"
	woken []string
}

type board struct {
	b   *boards
	bmc power.BMC
}

func (b board) PowerState(context.Context) (power.State, error) {
	b.b.mu.Lock()
	defer b.b.mu.Unlock()
	if b.b.on[b.bmc.Address] {
		return power.StateOn, nil
	}
	return power.StateOff, nil
}

func (b board) SetPower(_ context.Context, state string) error {
	b.b.mu.Lock()
	defer b.b.mu.Unlock()
	b.b.asked = append(b.b.asked, strings.Join([]string{b.bmc.Address, b.bmc.User, string(b.bmc.Password), state}, " "))
	b.b.on[b.bmc.Address] = state != "off"
	return nil
}

func (board) Close(context.Context) {}

// powerDaemon is a daemon with master, c1 (IPMI BMC), c2 (Redfish) and c3 (none) assigned; the
// master asks from its address with its MAC.
func powerDaemon(t *testing.T) (*daemon, *boards) {
	t.Helper()
	d := testDaemon(t)
	d.cfg.BMC.Nodes = []config.BMC{
		{Node: "c1", Protocol: "ipmi", Address: "10.80.1.101", User: "ADMIN"},
		{Node: "c2", Protocol: "redfish", Address: "10.80.1.102:8443", User: "root"},
		{Node: "master", Protocol: "ipmi", Address: "10.80.1.100", User: "ADMIN"},
	}
	for i, name := range []string{"master", "c1", "c2", "c3"} {
		mac := net.HardwareAddr{0x52, 0x54, 0, 0, 1, byte(i)}.String()
		if _, _, err := d.inv.See(mac, inventory.Facts{}); err != nil {
			t.Fatal(err)
		}
		if _, err := (controller{d}).Assign(ctl.AssignRequest{Name: name, MAC: mac}); err != nil {
			t.Fatal(err)
		}
	}
	bs := &boards{on: map[string]bool{"10.80.1.101": true}}
	d.power = &power.Switch{Interface: "lab0",
		Wake: func(ifname string, mac net.HardwareAddr) error {
			bs.mu.Lock()
			defer bs.mu.Unlock()
			bs.woken = append(bs.woken, ifname+" "+mac.String())
			return nil
		},
		OpenBMC: func(_ context.Context, b power.BMC) (power.Controller, error) { return board{bs, b}, nil }}
	d.neighbourMAC = func(a netip.Addr) (string, error) {
		n, err := d.inv.NodeByAddress(a)
		return n.MAC, err
	}
	return d, bs
}

func TestPowerFromCLI(t *testing.T) {
	d, bs := powerDaemon(t)
	c := controller{d}
	if err := c.SetBMCPassword(ctl.BMCPasswordRequest{Password: "every-bmc"}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetBMCPassword(ctl.BMCPasswordRequest{Node: "c2", Password: "c2-own"}); err != nil {
		t.Fatal(err)
	}
	r, err := c.Power(context.Background(), ctl.PowerRequest{Action: "off", Nodes: []string{"c[1-2]"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Results) != 2 || r.Results[0].Done != "switched off" || r.Results[1].Done != "was off already" {
		t.Fatalf("results %+v", r.Results)
	}
	if got := strings.Join(bs.asked, "; "); got != "10.80.1.101 ADMIN every-bmc off" {
		t.Fatalf("BMCs asked %q", got)
	}
	r, err = c.Power(context.Background(), ctl.PowerRequest{Action: "on", Nodes: []string{"c2", "c3"}})
	if err != nil || r.Results[0].Done != "switched on" || r.Results[1].Method != power.MethodWoL || r.Results[1].Done != "magic packet sent to 52:54:00:00:01:03" {
		t.Fatalf("on c2,c3: %+v, %v", r.Results, err)
	}
	if got := bs.asked[len(bs.asked)-1]; got != "10.80.1.102:8443 root c2-own on" {
		t.Fatalf("c2's BMC asked %q", got)
	}
	if len(bs.woken) != 1 || bs.woken[0] != "lab0 52:54:00:00:01:03" {
		t.Fatalf("woken %q", bs.woken)
	}
	// bootd nodes shows what it learned.
	p := c.Nodes().Power
	if p["c1"].State != power.StateOff || p["c2"].State != power.StateOn || p["c3"].Method != power.MethodWoL {
		t.Fatalf("nodes' power %+v", p)
	}
	for _, tt := range []struct {
		name    string
		req     ctl.PowerRequest
		wantErr string
	}{
		{"unknown node", ctl.PowerRequest{Action: "on", Nodes: []string{"c[3-5]"}}, "no node called c4, c5"},
		{"bad host list", ctl.PowerRequest{Action: "on", Nodes: []string{"c[1-"}}, "'[' without ']'"},
		{"no nodes", ctl.PowerRequest{Action: "on"}, "no node named"},
		{"bad action", ctl.PowerRequest{Action: "reboot", Nodes: []string{"c1"}}, "unknown power action"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Power(context.Background(), tt.req)
			if !errors.Is(err, ctl.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err %v, want ErrInvalid with %q", err, tt.wantErr)
			}
		})
	}
}

func TestPowerWithoutPassword(t *testing.T) {
	d, bs := powerDaemon(t)
	r, err := (controller{d}).Power(context.Background(), ctl.PowerRequest{Action: "on", Nodes: []string{"c1"}})
	if err != nil || !strings.Contains(r.Results[0].Error, "bootd power password c1") || len(bs.asked) != 0 {
		t.Fatalf("%+v, %v; asked %q", r.Results, err, bs.asked)
	}
}

// Only the master asks for power, from its address, a privileged port and its MAC, and only for
// computes.
func TestNodePower(t *testing.T) {
	d, bs := powerDaemon(t)
	if err := d.setBMCPassword(ctl.BMCPasswordRequest{Password: "pw"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, from, body string
		wantErr          error
		want             string
	}{
		{"the master switches a compute off", "10.80.0.100:700", `{"action":"off","nodes":"c1"}`, nil, "c1 ipmi ok switched off\n"},
		{"and on, with one without BMC", "10.80.0.100:700", `{"action":"on","nodes":"c[1,3]"}`, nil,
			"c1 ipmi ok switched on\nc3 wake-on-lan ok magic packet sent to 52:54:00:00:01:03\n"},
		{"off without a BMC fails for that node", "10.80.0.100:700", `{"action":"off","nodes":"c3"}`, nil, "c3 wake-on-lan failed c3 has no BMC"},
		{"a compute may not ask", "10.80.0.101:700", `{"action":"off","nodes":"c2"}`, httpd.ErrForbidden, ""},
		{"nor a user of the master", "10.80.0.100:40000", `{"action":"off","nodes":"c2"}`, httpd.ErrForbidden, ""},
		{"nor anyone else", "10.80.0.50:700", `{"action":"off","nodes":"c2"}`, httpd.ErrForbidden, ""},
		{"the master is not switched", "10.80.0.100:700", `{"action":"off","nodes":"master,c1"}`, httpd.ErrForbidden, ""},
		{"no cycle", "10.80.0.100:700", `{"action":"cycle","nodes":"c1"}`, httpd.ErrInvalid, ""},
		{"unknown field", "10.80.0.100:700", `{"action":"off","nodes":"c1","force":true}`, httpd.ErrInvalid, ""},
		{"unknown node", "10.80.0.100:700", `{"action":"off","nodes":"c9"}`, httpd.ErrInvalid, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := len(bs.asked)
			_, reply, err := d.nodePower(context.Background(), netip.MustParseAddrPort(tt.from), "", []byte(tt.body))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || len(bs.asked) != asked {
					t.Fatalf("err %v, want %v; BMCs asked %q", err, tt.wantErr, bs.asked[asked:])
				}
				return
			}
			if err != nil || !strings.HasPrefix(string(reply), tt.want) {
				t.Fatalf("reply %q, %v; want %q", reply, err, tt.want)
			}
		})
	}
}

func TestNames(t *testing.T) {
	d, _ := powerDaemon(t)
	if _, _, err := d.inv.See("52:54:00:00:09:09", inventory.Facts{}); err != nil {
		t.Fatal(err)
	}
	n := (controller{d}).Names()
	if strings.Join(n.Nodes, " ") != "c1 c2 c3 master" || strings.Join(n.Waiting, " ") != "52:54:00:00:09:09" || strings.Join(n.Free, " ") != "c4" {
		t.Fatalf("names %+v", n)
	}
}
