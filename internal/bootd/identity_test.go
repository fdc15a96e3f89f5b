package bootd

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/secrets"
)

const (
	machineA = "52:54:00:00:00:0a"
	machineB = "52:54:00:00:00:0b"
	c1From   = "10.80.0.101:700" // c1's address, a privileged port
)

// assignC1 names machine mac c1 (it netbooted first), replacing c1's machine when replace.
func assignC1(t *testing.T, d *daemon, mac string, replace bool) error {
	t.Helper()
	if _, _, err := d.inv.See(mac, inventory.Facts{}); err != nil {
		t.Fatal(err)
	}
	_, err := (controller{d}).Assign(ctl.AssignRequest{Name: "c1", MAC: mac, Replace: replace})
	return err
}

// c1HostKey is the ed25519 host private key in the overlay that c1's address gets, with the
// neighbour table saying the address is at mac.
func c1HostKey(t *testing.T, d *daemon, mac string) string {
	t.Helper()
	d.neighbourMAC = func(netip.Addr) (string, error) { return mac, nil }
	o, err := nodes{d}.Overlay(netip.MustParseAddrPort(c1From), nil)
	files := o.Files
	if err != nil {
		t.Fatalf("overlay of c1 for %s: %v", mac, err)
	}
	for _, f := range files {
		if f.Path == "/etc/ssh/ssh_host_ed25519_key" {
			return string(f.Data)
		}
	}
	t.Fatal("c1's overlay has no ed25519 host key")
	return ""
}

// replaceDuringIdentify makes the next request's identify, at its last step (A accepted as c1),
// check that the request holds the identity lock (so an assign waits for it to be done with A),
// then set off `assign c1 --mac B --replace`. The returned function waits for the replace.
func replaceDuringIdentify(t *testing.T, d *daemon) (waitReplaced func()) {
	t.Helper()
	if _, _, err := d.inv.See(machineB, inventory.Facts{}); err != nil {
		t.Fatal(err)
	}
	replaced := make(chan error, 1)
	d.neighbourMAC = func(netip.Addr) (string, error) {
		if d.identity.TryLock() {
			d.identity.Unlock()
			t.Error("identify runs without the identity lock: an assign could move c1 while the request acts on A")
		}
		go func() {
			_, err := (controller{d}).Assign(ctl.AssignRequest{Name: "c1", MAC: machineB, Replace: true})
			replaced <- err
		}()
		return machineA, nil
	}
	return func() {
		if err := <-replaced; err != nil {
			t.Fatal(err)
		}
	}
}

// `assign c1 --replace` while old machine A's overlay request is past identify: the assign waits
// for the request, so A gets its own (old) keys, never the ones made for B.
func TestReplaceWaitsForOverlayInFlight(t *testing.T) {
	d := testDaemon(t)
	if err := assignC1(t, d, machineA, false); err != nil {
		t.Fatal(err)
	}
	old := c1HostKey(t, d, machineA)
	waitReplaced := replaceDuringIdentify(t, d)
	o, err := nodes{d}.Overlay(netip.MustParseAddrPort(c1From), nil)
	files := o.Files
	if err != nil {
		t.Fatal(err)
	}
	var givenToA string
	for _, f := range files {
		if f.Path == "/etc/ssh/ssh_host_ed25519_key" {
			givenToA = string(f.Data)
		}
	}
	waitReplaced()
	if givenToA == c1HostKey(t, d, machineB) {
		t.Fatal("old machine A received the host key made for B")
	}
	if givenToA != old {
		t.Error("A's request got other keys than A's own")
	}
	d.neighbourMAC = func(netip.Addr) (string, error) { return machineA, nil }
	if _, err := (nodes{d}).Overlay(netip.MustParseAddrPort(c1From), nil); err == nil {
		t.Error("A's overlay request served after the replace")
	}
}

// The same for A's hardware report: it lands on A's record, which the replace then drops, not on
// B's.
func TestReplaceWaitsForHardwareReportInFlight(t *testing.T) {
	d := testDaemon(t)
	if err := assignC1(t, d, machineA, false); err != nil {
		t.Fatal(err)
	}
	waitReplaced := replaceDuringIdentify(t, d)
	report := `{"slurmd_c":"NodeName=c1 CPUs=8 RealMemory=15866","gpus":["NVIDIA GeForce RTX 3090"]}`
	if _, _, err := (nodes{d}).ReportHardware(netip.MustParseAddrPort(c1From), "", []byte(report)); err != nil {
		t.Fatal(err)
	}
	waitReplaced()
	for _, n := range mustSnapshot(d) {
		if n.Name == "c1" && (n.MAC != machineB || n.Hardware != nil) {
			t.Errorf("c1 after the replace: machine %s, hardware %+v; want %s with none reported yet", n.MAC, n.Hardware, machineB)
		}
	}
}

// bootd stops after an unassign reached the inventory and before the host keys were forgotten,
// or after a replace and before any render revoked the old machine's keys: at the next start
// (secrets.Prune) the old keys are revoked, and the next machine named c1 gets fresh ones.
func TestForgetLostInACrash(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(d *daemon) error
	}{
		{"unassign", func(d *daemon) error { _, err := d.inv.Unassign("c1"); return err }},
		{"replace", func(d *daemon) error {
			_, err := d.inv.Assign(inventory.AssignRequest{Name: "c1", Role: "compute", Address: netip.MustParseAddr("10.80.0.101"), MAC: machineB, Replace: true})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			d := daemonOn(t, state)
			if err := assignC1(t, d, machineA, false); err != nil {
				t.Fatal(err)
			}
			keyA := c1HostKey(t, d, machineA)
			if _, _, err := d.inv.See(machineB, inventory.Facts{}); err != nil {
				t.Fatal(err)
			}
			if err := tc.change(d); err != nil { // the inventory's half of the controller's work
				t.Fatal(err)
			}
			// crash; bootd starts again on the same state directory, and forgets A's keys
			d = daemonOn(t, state)
			if revoked := d.secrets.RevokedHostKeys(); len(revoked) != len(secrets.HostKeyTypes) {
				t.Errorf("revoked at start: %q, want A's %d keys", revoked, len(secrets.HostKeyTypes))
			}
			if tc.name == "unassign" {
				if err := assignC1(t, d, machineB, false); err != nil {
					t.Fatal(err)
				}
			}
			if c1HostKey(t, d, machineB) == keyA {
				t.Fatal("machine B got machine A's host key")
			}
			if revoked := d.secrets.RevokedHostKeys(); len(revoked) != len(secrets.HostKeyTypes) {
				t.Errorf("revoked %q: want A's %d keys", revoked, len(secrets.HostKeyTypes))
			}
		})
	}
}

// Every node's known_hosts refuses the keys a name's earlier machine held, from the first render
// after `assign --replace` moved the name (that render revokes them).
func TestOverlayCarriesRevokedKeys(t *testing.T) {
	d := testDaemon(t)
	if err := assignC1(t, d, machineA, false); err != nil {
		t.Fatal(err)
	}
	keyA := c1HostKey(t, d, machineA)
	if err := assignC1(t, d, machineB, true); err != nil {
		t.Fatal(err)
	}
	files, err := d.renderer().Render(mustSnapshot(d), "c1")
	if err != nil {
		t.Fatal(err)
	}
	revoked := d.secrets.RevokedHostKeys()
	if len(revoked) != len(secrets.HostKeyTypes) {
		t.Fatalf("revoked %q, want A's %d keys", revoked, len(secrets.HostKeyTypes))
	}
	for _, f := range files {
		switch f.Path {
		case "/etc/ssh/ssh_known_hosts":
			for _, r := range revoked {
				if want := "@revoked * " + r; !containsLine(string(f.Data), want) {
					t.Errorf("known_hosts lacks %q:\n%s", want, f.Data)
				}
			}
		case "/etc/ssh/ssh_host_ed25519_key":
			if string(f.Data) == keyA {
				t.Error("B's files hold A's host key")
			}
		}
	}
}

func mustSnapshot(d *daemon) []inventory.Node {
	nodes, _ := d.inv.Snapshot()
	return nodes
}

func containsLine(text, line string) bool {
	return slices.Contains(strings.Split(text, "\n"), line)
}

// A node's report says whether it changed what bootd holds: the first one does (the node's first
// boot fetched its overlay before it could report, so it fetches it again, now with its GPUs,
// before slurmd starts), the same again does not, another GPU does.
func TestHardwareReportChanged(t *testing.T) {
	d := testDaemon(t)
	if err := assignC1(t, d, machineA, false); err != nil {
		t.Fatal(err)
	}
	d.neighbourMAC = func(netip.Addr) (string, error) { return machineA, nil }
	const line = `"slurmd_c":"NodeName=c1 CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=2 RealMemory=15866"`
	oneGPU := `{` + line + `,"gpus":["NVIDIA GeForce RTX 3090"]}`
	twoGPUs := `{` + line + `,"gpus":["NVIDIA GeForce RTX 3090","NVIDIA GeForce RTX 3090"]}`
	for _, step := range []struct {
		name, report string
		changed      bool
	}{
		{"first report", oneGPU, true},
		{"the same again (next boot)", oneGPU, false},
		{"a GPU added", twoGPUs, true},
		{"no GPU list at all", `{` + line + `}`, true},
		{"no GPUs again, as an empty list", `{` + line + `,"gpus":[]}`, false},
	} {
		_, changed, err := (nodes{d}).ReportHardware(netip.MustParseAddrPort(c1From), "", []byte(step.report))
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if changed != step.changed {
			t.Errorf("%s: changed %v, want %v", step.name, changed, step.changed)
		}
	}
}
