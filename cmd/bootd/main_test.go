package main

import (
	"bytes"
	"flag"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/inventory"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestParseInterleaved(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantPos  []string
		wantMAC  string
		wantRepl bool
	}{
		{"flags after the name", []string{"c4", "--mac", "52:54:00:00:00:01"}, []string{"c4"}, "52:54:00:00:00:01", false},
		{"flags before the name", []string{"--mac", "m", "--replace", "c4"}, []string{"c4"}, "m", true},
		{"mixed", []string{"--replace", "c4", "--mac=m"}, []string{"c4"}, "m", true},
		{"two names", []string{"c4", "c5"}, []string{"c4", "c5"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			mac := fs.String("mac", "", "")
			repl := fs.Bool("replace", false, "")
			pos, err := parseInterleaved(fs, tt.args)
			if err != nil || !slices.Equal(pos, tt.wantPos) || *mac != tt.wantMAC || *repl != tt.wantRepl {
				t.Fatalf("got %v mac=%q replace=%v err=%v", pos, *mac, *repl, err)
			}
		})
	}
}

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
