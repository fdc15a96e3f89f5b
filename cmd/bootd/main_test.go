package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/check"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/power"
	"github.com/labcluster/gpucluster/internal/testkit/golden"
)

// Endorsement keys as the inventory records them: one a node presented, one the admin pinned.
var (
	tpmFirstBoot = inventory.TPM{EK: []byte("ek1"), EKSHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
	tpmPinned    = inventory.TPM{EK: []byte("ek2"), EKSHA256: "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752", Pinned: true}
)

func TestNodeRoot(t *testing.T) {
	for _, tc := range []struct {
		root ctl.Root
		want string
	}{
		{ctl.Root{Source: "cache", Storage: "disk", Size: 1 << 30, FromSeeds: 1 << 30}, "cache hit"},
		{ctl.Root{Source: "chunks", Storage: "disk", Size: 1 << 30, FromBootd: 1 << 26, FromSeeds: 1<<30 - 1<<26}, "fetched to cache (6% from bootd)"},
		{ctl.Root{Source: "whole", Storage: "disk", Size: 1 << 30, FromBootd: 1 << 30}, "fetched to cache (whole file)"},
		{ctl.Root{Source: "chunks", Storage: "ram", Size: 1 << 30, FromBootd: 1 << 25, FromPeers: 1<<30 - 1<<25}, "RAM only (3% from bootd)"},
		{ctl.Root{Source: "whole", Storage: "ram", Size: 1 << 30, FromBootd: 1 << 30}, "RAM only (whole file)"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := nodeRoot(map[string]ctl.Root{"c1": tc.root}, "c1"); got != tc.want {
				t.Errorf("ROOT %q, want %q", got, tc.want)
			}
		})
	}
	if got := nodeRoot(nil, "c1"); got != "-" {
		t.Errorf("ROOT of a node that reported nothing: %q, want -", got)
	}
}

func TestPrintNodes(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	t.Setenv("TZ", "UTC")
	r := ctl.NodesReply{
		Nodes: []inventory.Node{
			{Name: "master", Role: "master", MAC: "52:54:00:00:00:01", Address: netip.MustParseAddr("10.80.0.100"), State: inventory.StateUp, LastSeen: now.Add(-5 * time.Second)},
			{Name: "c1", Role: "compute", MAC: "52:54:00:00:00:03", Address: netip.MustParseAddr("10.80.0.101"), State: inventory.StateReady, LastSeen: now.Add(-2 * time.Second),
				Hardware: &inventory.Hardware{CPUs: 16, RealMemoryMiB: 64000, GPUs: []inventory.GPU{{Type: "rtx3090", File: "/dev/nvidia0"}, {Type: "rtx3090", File: "/dev/nvidia1"}}},
				TPM:      &tpmFirstBoot},
			{Name: "c2", Role: "compute", MAC: "52:54:00:00:00:04", Address: netip.MustParseAddr("10.80.0.102"), State: inventory.StateAssigned, TPM: &tpmPinned},
		},
		Waiting: []inventory.Machine{{MAC: "52:54:00:00:00:02", Facts: inventory.Facts{Manufacturer: "QEMU", Product: "Standard PC", Platform: "efi", Arch: "x86_64"},
			FirstSeen: now.Add(-2 * time.Minute), LastSeen: now.Add(-time.Second)}},
		Power: map[string]power.Result{"c1": {Node: "c1", Method: power.MethodIPMI, BMC: "10.80.1.101", State: power.StateOn}},
		NotStarted: []ctl.LoaderTrouble{
			{MAC: "52:54:00:00:00:07", Fetched: map[string]int{"ipxe.efi": 1}, LastFetched: now.Add(-time.Minute), Next: "snponly.efi",
				Advice: "ipxe.efi never started on it: it gets snponly.efi at its next netboot (power-cycle it)"},
			{MAC: "52:54:00:00:00:08", Node: "c4", Fetched: map[string]int{"ipxe.efi": 1, "snponly.efi": 2}, LastFetched: now.Add(-30 * time.Second), Next: "snponly.efi",
				Advice: "Secure Boot is probably on, and refuses the unsigned iPXE: turn Secure Boot off in the PC's firmware setup and netboot it again (README: Secure Boot)"},
		},
		Roots: map[string]ctl.Root{"c1": {Source: "chunks", Storage: "ram", Size: 1 << 30, FromBootd: 1 << 25, FromPeers: 1<<30 - 1<<25}},
	}
	var buf bytes.Buffer
	printNodes(&buf, r, now)
	golden.Check(t, "testdata/nodes.txt", buf.Bytes())
}

// TestPrintAssigned: the answer to `bootd assign` says what the node boots, or, when its role has
// no bootable image, that it will wait, where bootd looks and how to build one.
func TestPrintAssigned(t *testing.T) {
	node := inventory.Node{Name: "c4", Role: "compute", MAC: "52:54:00:12:34:56", Address: netip.MustParseAddr("10.80.0.104")}
	for _, tt := range []struct {
		name     string
		replaced string
		image    ctl.BootImage
		tpm      *inventory.TPM
	}{
		{"image-ready", "", ctl.BootImage{Name: "compute", Version: "2026.11.21-1", Dir: "/var/lib/bootd/images"}, nil},
		{"ek-pinned", "", ctl.BootImage{Name: "compute", Version: "2026.11.21-1", Dir: "/var/lib/bootd/images"}, &tpmPinned},
		{"replaced", "52:54:00:00:00:04", ctl.BootImage{Name: "compute", Version: "2026.11.21-1", Dir: "/var/lib/bootd/images"}, nil},
		{"no-image", "", ctl.BootImage{Name: "compute", Dir: "/var/lib/bootd/images",
			Problem: "resolve image compute: open /var/lib/bootd/images/compute: no such file or directory: not found"}, nil},
		{"pinned-missing", "", ctl.BootImage{Name: "compute", Pinned: "2026.11.20-1", Dir: "/srv/images",
			Problem: "resolve image compute pinned to 2026.11.20-1: not found"}, nil},
		{"older-daemon", "", ctl.BootImage{}, nil},
		{"verifying", "", ctl.BootImage{Name: "compute", Dir: "/var/lib/bootd/images", Verifying: true}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			n := node
			n.TPM = tt.tpm
			printAssigned(&buf, ctl.AssignReply{Node: n, Replaced: tt.replaced, Image: tt.image})
			golden.Check(t, "testdata/assign-"+tt.name+".txt", buf.Bytes())
		})
	}
}

// TestServePaths: relative path flags are taken from the directory bootd was started in, and
// said so; absolute ones and the defaults stay as they are.
func TestServePaths(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("bootd.toml", []byte("state_dir = \"/srv/bootd\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name                string
		args                []string
		state, images, ipxe string
		resolved            []string
	}{
		{"defaults", nil, "/var/lib/bootd", "/var/lib/bootd/images", "", nil},
		{"relative flags", []string{"--state-dir", "relstate", "--images", "img/../images", "--ipxe-dir", "./ipxe"},
			dir + "/relstate", dir + "/images", dir + "/ipxe", []string{"state-dir", "images", "ipxe-dir"}},
		{"absolute flags", []string{"--state-dir", "/srv/state", "--images", "/srv/images"}, "/srv/state", "/srv/images", "", nil},
		{"relative config", []string{"--config", "bootd.toml"}, "/srv/bootd", "/var/lib/bootd/images", "", []string{"config"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseServe(tt.args, func(string) string { return "" })
			if err != nil {
				t.Fatal(err)
			}
			c := o.cfg
			if c.StateDir != tt.state || c.ImagesDir != tt.images || c.IPXEDir != tt.ipxe {
				t.Errorf("state %s, images %s, ipxe %s; want %s, %s, %s", c.StateDir, c.ImagesDir, c.IPXEDir, tt.state, tt.images, tt.ipxe)
			}
			var flags []string
			for _, r := range o.resolved {
				flags = append(flags, r.flag)
			}
			if !slices.Equal(flags, tt.resolved) {
				t.Errorf("resolved %v, want %v logged", o.resolved, tt.resolved)
			}
		})
	}
}

// TestServeLogFormat: --log-format, then the config file's log_format, then $BOOTD_LOG_FORMAT
// (dist/bootd.service's json), then text; a bad one is refused, naming where it came from.
func TestServeLogFormat(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "text.toml")
	if err := os.WriteFile(text, []byte("log_format = \"text\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		env  string
		want string // or the error
	}{
		{"default", nil, "", "text"},
		{"the unit's default", nil, "json", "json"},
		{"the config file wins over the unit", []string{"--config", text}, "json", "text"},
		{"the flag wins over both", []string{"--config", text, "--log-format", "json"}, "text", "json"},
		{"a bad flag", []string{"--log-format", "xml"}, "", `usage: --log-format "xml": want text or json`},
		{"a bad environment", nil, "JSON", `usage: $BOOTD_LOG_FORMAT "JSON": want text or json`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseServe(tt.args, func(k string) string { return map[string]string{logFormatEnv: tt.env}[k] })
			if strings.HasPrefix(tt.want, "usage") {
				if err == nil || err.Error() != tt.want || !errors.Is(err, errUsage) {
					t.Errorf("error %v, want %s", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.cfg.LogFormat != tt.want {
				t.Errorf("log format %q, want %q", o.cfg.LogFormat, tt.want)
			}
		})
	}
}

// TestHardware: the HARDWARE column counts in the singular for one.
func TestHardware(t *testing.T) {
	rtx := inventory.GPU{Type: "rtx3090", File: "/dev/nvidia0"}
	for _, tt := range []struct {
		name string
		hw   *inventory.Hardware
		want string
	}{
		{"not reported", nil, "-"},
		{"one CPU", &inventory.Hardware{CPUs: 1, RealMemoryMiB: 480}, "1 CPU, 0.5 GiB"},
		{"CPUs", &inventory.Hardware{CPUs: 8, RealMemoryMiB: 15872}, "8 CPUs, 15.5 GiB"},
		{"one GPU", &inventory.Hardware{CPUs: 16, RealMemoryMiB: 64000, GPUs: []inventory.GPU{rtx}}, "16 CPUs, 62.5 GiB, 1 GPU (rtx3090)"},
		{"GPUs", &inventory.Hardware{CPUs: 16, RealMemoryMiB: 64000, GPUs: []inventory.GPU{rtx, rtx}}, "16 CPUs, 62.5 GiB, 2 GPUs (rtx3090)"},
		{"one GiB", &inventory.Hardware{CPUs: 2, RealMemoryMiB: 1024}, "2 CPUs, 1.0 GiB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := hardware(tt.hw); got != tt.want {
				t.Errorf("hardware(%+v) = %q, want %q", tt.hw, got, tt.want)
			}
		})
	}
}

func TestPrintPower(t *testing.T) {
	rs := []power.Result{
		{Node: "c1", Method: power.MethodIPMI, BMC: "10.80.1.101", State: power.StateOff, Done: "switched off"},
		{Node: "c2", Method: power.MethodRedfish, BMC: "10.80.1.102:8443", State: power.StateUnknown,
			Error: "redfish BMC at 10.80.1.102:8443: cannot log in (is it on the network, and are the user and the password given with `bootd power password` right?): 401"},
		{Node: "c3", Method: power.MethodWoL, State: power.StateUnknown, Done: "magic packet sent to 52:54:00:00:00:03"},
	}
	var buf bytes.Buffer
	printPower(&buf, rs)
	golden.Check(t, "testdata/power.txt", buf.Bytes())
	for _, tt := range []struct {
		r    power.Result
		want string
	}{{rs[0], "off"}, {rs[1], "?"}, {rs[2], "woken"}, {power.Result{Method: power.MethodWoL, Done: "no BMC to ask"}, "-"}} {
		if got := nodePower(map[string]power.Result{"x": tt.r}, "x"); got != tt.want {
			t.Errorf("nodePower(%+v) = %q, want %q", tt.r, got, tt.want)
		}
	}
	if got := nodePower(nil, "x"); got != "-" {
		t.Errorf("nodePower of a node bootd knows nothing of = %q", got)
	}
	// Exit status 1 when any node was not reached, naming it; 0 otherwise.
	if err := notReached(rs); err == nil || err.Error() != "1 of 3 nodes not reached: c2" {
		t.Errorf("notReached = %v, want c2 named", err)
	}
	if err := notReached([]power.Result{rs[0], rs[2]}); err != nil {
		t.Errorf("notReached of nodes all reached = %v", err)
	}
}

// TestPrintReport: `bootd check` prints a line per node, then each failure with what was seen
// and its fix (with --verbose, every check).
func TestPrintReport(t *testing.T) {
	r := check.Report{Master: "master (10.80.0.100)", Took: 12345 * time.Millisecond, Nodes: []check.NodeReport{
		{Name: "master", Role: "master", Passed: true, State: inventory.StateValidated, Results: []check.Result{
			{Check: check.SSH, Status: check.Pass, Detail: "bootd logs in as root"},
			{Check: check.Slurmctld, Status: check.Pass, Detail: "Slurmctld(primary) at master is UP"},
		}},
		{Name: "c1", Role: "compute", Passed: true, State: inventory.StateValidated, Results: []check.Result{
			{Check: check.Munge, Status: check.Pass, Detail: "a credential made on c1 decodes on the master"},
			{Check: check.GPUs, Status: check.Skip, Detail: "gres lists no GPUs on c1"},
		}},
		{Name: "c2", Role: "compute", State: inventory.StateReady, Results: []check.Result{
			{Check: check.Munge, Status: check.Fail, Detail: "a credential made on c2 does not decode on the master: Invalid credential (6)", Fix: "the munge keys differ"},
			{Check: check.Srun, Status: check.Pass, Detail: "srun ran on c2"},
		}},
		{Name: "c3", Role: "compute", Skipped: true, State: inventory.StateValidated, Results: []check.Result{
			{Check: check.Slurmd, Status: check.Skip, Detail: "c3 is switched off by Slurm's power saving (IDLE+POWERED_DOWN); it wakes for the next job that wants it, or `bootd power on c3`"},
		}},
	}}
	for _, verbose := range []bool{false, true} {
		t.Run(fmt.Sprint("verbose=", verbose), func(t *testing.T) {
			var buf bytes.Buffer
			printReport(&buf, r, verbose)
			golden.Check(t, fmt.Sprintf("testdata/check-verbose-%v.txt", verbose), buf.Bytes())
		})
	}
	if got, want := failedSummary(r), "c2 (munge)"; got != want {
		t.Errorf("failedSummary = %q, want %q", got, want)
	}
}
