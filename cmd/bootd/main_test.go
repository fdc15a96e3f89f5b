package main

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/golden"
	"github.com/labcluster/gpucluster/internal/inventory"
)

func TestPrintNodes(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	t.Setenv("TZ", "UTC")
	r := ctl.NodesReply{
		Nodes: []inventory.Node{
			{Name: "master", Role: "master", MAC: "52:54:00:00:00:01", Address: netip.MustParseAddr("10.80.0.100"), State: inventory.StateUp, LastSeen: now.Add(-5 * time.Second)},
			{Name: "c1", Role: "compute", MAC: "52:54:00:00:00:03", Address: netip.MustParseAddr("10.80.0.101"), State: inventory.StateReady, LastSeen: now.Add(-2 * time.Second),
				Hardware: &inventory.Hardware{CPUs: 16, RealMemoryMiB: 64000, GPUs: []inventory.GPU{{Type: "rtx3090", File: "/dev/nvidia0"}, {Type: "rtx3090", File: "/dev/nvidia1"}}}},
		},
		Waiting: []inventory.Machine{{MAC: "52:54:00:00:00:02", Facts: inventory.Facts{Manufacturer: "QEMU", Product: "Standard PC", Platform: "efi", Arch: "x86_64"},
			FirstSeen: now.Add(-2 * time.Minute), LastSeen: now.Add(-time.Second)}},
	}
	var buf bytes.Buffer
	printNodes(&buf, r, now)
	golden.Check(t, "testdata/nodes.txt", buf.Bytes())
}
