package main

import (
	"bytes"
	"flag"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/inventory"
)

var update = flag.Bool("update", false, "rewrite golden files")

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
	golden := "testdata/nodes.txt"
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if buf.String() != string(want) {
		t.Errorf("bootd nodes output:\n%s\nwant:\n%s", buf.String(), want)
	}
}
