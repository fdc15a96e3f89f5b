package bootd

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/inventory"
)

func TestIdentify(t *testing.T) {
	d := testDaemon(t)
	if _, _, err := d.inv.See("52:54:00:00:00:01", inventory.Facts{}); err != nil {
		t.Fatal(err)
	}
	if _, err := (controller{d}).Assign(ctl.AssignRequest{Name: "c1"}); err != nil {
		t.Fatal(err)
	}
	arp := map[string]string{"10.80.0.101": "52:54:00:00:00:01", "10.80.0.102": "52:54:00:00:00:01"}
	tests := []struct {
		name      string
		from      string
		arpMAC    string // override of what the neighbour table says for the address
		forbidden bool
	}{
		{"the node, from a privileged port", "10.80.0.101:700", "", false},
		{"the node's address, unprivileged port (a user's process)", "10.80.0.101:40000", "", true},
		{"another address", "10.80.0.102:700", "", true},
		{"the node's address with another MAC (address taken)", "10.80.0.101:700", "52:54:00:66:66:66", true},
		{"no neighbour entry", "10.80.0.101:700", "none", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d.neighbourMAC = func(a netip.Addr) (string, error) {
				switch tt.arpMAC {
				case "none":
					return "", errors.New("no entry")
				case "":
					return arp[a.String()], nil
				}
				return tt.arpMAC, nil
			}
			_, err := d.identify(netip.MustParseAddrPort(tt.from))
			if errors.Is(err, httpd.ErrForbidden) != tt.forbidden {
				t.Fatalf("identify(%s) = %v, forbidden want %v", tt.from, err, tt.forbidden)
			}
			// hello, which marks the node up, is held to the same checks (it once took the
			// address alone). Without an image to boot it fails after that, not forbidden.
			_, err = (nodes{d}).Hello(netip.MustParseAddrPort(tt.from), "")
			if errors.Is(err, httpd.ErrForbidden) != tt.forbidden {
				t.Fatalf("Hello(%s) = %v, forbidden want %v", tt.from, err, tt.forbidden)
			}
		})
	}
}

func TestParseHardware(t *testing.T) {
	tests := []struct {
		name, report string
		want         inventory.Hardware
		bad          bool
	}{
		{"cpu node", `{"slurmd_c":"NodeName=c1 CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=2 RealMemory=15866","gpus":[]}`,
			inventory.Hardware{CPUs: 8, Boards: 1, Sockets: 1, CoresPerSocket: 4, ThreadsPerCore: 2, RealMemoryMiB: 15866}, false},
		{"two GPUs", `{"slurmd_c":"NodeName=c2 CPUs=16 RealMemory=64000","gpus":["NVIDIA GeForce RTX 3090","NVIDIA GeForce RTX 3090"]}`,
			inventory.Hardware{CPUs: 16, RealMemoryMiB: 64000, GPUs: []inventory.GPU{{Type: "rtx3090", File: "/dev/nvidia0"}, {Type: "rtx3090", File: "/dev/nvidia1"}}}, false},
		{"no slurmd line", `{"slurmd_c":"","gpus":[]}`, inventory.Hardware{}, true},
		{"garbage count", `{"slurmd_c":"CPUs=lots RealMemory=1"}`, inventory.Hardware{}, true},
		{"unknown field", `{"slurmd_c":"CPUs=1 RealMemory=1","root":"yes"}`, inventory.Hardware{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := HardwareFromReport([]byte(tt.report))
			if (err != nil) != tt.bad {
				t.Fatalf("err = %v, bad want %v", err, tt.bad)
			}
			if !tt.bad && !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("hardware = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestOverlayGoesToItsNode(t *testing.T) {
	d := testDaemon(t)
	for _, a := range []struct{ mac, name string }{{"52:54:00:00:00:01", "master"}, {"52:54:00:00:00:02", "c1"}} {
		if _, _, err := d.inv.See(a.mac, inventory.Facts{}); err != nil {
			t.Fatal(err)
		}
		if _, err := (controller{d}).Assign(ctl.AssignRequest{Name: a.name, MAC: a.mac}); err != nil {
			t.Fatal(err)
		}
	}
	d.neighbourMAC = func(a netip.Addr) (string, error) {
		return map[string]string{"10.80.0.100": "52:54:00:00:00:01", "10.80.0.101": "52:54:00:00:00:02"}[a.String()], nil
	}
	o, err := nodes{d}.Overlay(netip.MustParseAddrPort("10.80.0.101:700"), nil)
	name, files := o.Node, o.Files
	if err != nil || name != "c1" {
		t.Fatalf("Overlay = %s, %v", name, err)
	}
	got := map[string]string{}
	for _, f := range files {
		got[f.Path] = string(f.Data)
	}
	if got["/etc/hostname"] != "c1\n" || len(got["/etc/munge/munge.key"]) != 1024 || got["/etc/ssh/ssh_host_ed25519_key"] == "" {
		t.Fatalf("c1's overlay lacks its hostname, munge key or host key: %d files", len(files))
	}
	if _, ok := got["/root/.ssh/id_ed25519"]; ok {
		t.Fatal("a compute received root's private key")
	}
	master, _ := d.secrets.HostKeys("master", holders(d.inv)["master"])
	for path, data := range got {
		for _, k := range master {
			if strings.Contains(data, k.Private) {
				t.Fatalf("c1's %s holds the master's %s host private key", path, k.Type)
			}
		}
	}
}

func TestOverlayBeforeTheMasterIsAssigned(t *testing.T) {
	d := testDaemon(t)
	nodes := []inventory.Node{{Name: "c1", Role: "compute", Address: netip.MustParseAddr("10.80.0.101"), MAC: "52:54:00:00:00:02"}}
	files, err := d.renderer().Render(nodes, "c1")
	if err != nil {
		t.Fatalf("c1's overlay with no master assigned yet: %v", err)
	}
	for _, f := range files {
		// The whole plan: the master not yet assigned, and c99 for a node assigned some day.
		if f.Path == "/etc/hosts" && (!strings.Contains(string(f.Data), "10.80.0.100") || !strings.Contains(string(f.Data), "10.80.0.199     c99")) {
			t.Fatalf("c1's /etc/hosts lacks the address plan:\n%s", f.Data)
		}
	}
}
