package bootd

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/secrets"
	"github.com/labcluster/gpucluster/overlays"
)

// BenchmarkRender renders one compute's overlay in a cluster of N assigned nodes, as bootd does
// for each node that boots, so a boot storm of N nodes renders N times. It times a daemon that
// has rendered before ("warm") against the baseline of one just started on the same state
// ("cold": a fresh secrets store, every key read from disk), and reports warm/cold.
// Run: go test -run '^$' -bench Render ./internal/bootd
func BenchmarkRender(b *testing.B) {
	for _, n := range []int{10, 50, 200} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			state, nodes := clusterWithKeys(b, n)
			warm := rendererOn(b, state)
			renderOf(b, warm, nodes, "c1") // signs every certificate, once
			var warmTime, coldTime time.Duration
			for b.Loop() {
				warmTime += timedRender(b, warm, nodes)
				coldTime += timedRender(b, rendererOn(b, state), nodes)
			}
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			b.ReportMetric(per(warmTime), "warm-µs/render")
			b.ReportMetric(per(coldTime), "cold-µs/render")
			b.ReportMetric(warmTime.Seconds()/coldTime.Seconds(), "warm/cold")
			b.ReportMetric(0, "ns/op") // the loop times two renders; the figures above are each one
		})
	}
}

// clusterWithKeys is a state directory holding n assigned computes, c1..cn, each with host keys
// and no certificate yet. The keys are c1's, copied: ssh-keygen would take minutes for 200 RSA
// keys, and the renderer reads a copy as it reads any key.
func clusterWithKeys(b testing.TB, n int) (string, []inventory.Node) {
	b.Helper()
	state := b.TempDir()
	sec, err := secrets.Open(state)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := sec.HostKeys("c1", ""); err != nil {
		b.Fatal(err)
	}
	hosts := filepath.Join(sec.Dir(), "hosts")
	nodes := make([]inventory.Node, n)
	for i := range nodes {
		name := fmt.Sprintf("c%d", i+1)
		nodes[i] = inventory.Node{Name: name, Role: "compute", MAC: fmt.Sprintf("52:54:00:00:%02x:%02x", (i+1)>>8, (i+1)&0xff),
			Address: netip.AddrFrom4([4]byte{10, 80, byte(1 + (i+1)/256), byte((i + 1) % 256)}), AssignedAt: time.Unix(1700000000, 0)}
		if i > 0 {
			copyKeys(b, filepath.Join(hosts, "c1"), filepath.Join(hosts, name))
		}
	}
	return state, nodes
}

// copyKeys copies a node's key pairs (not its certificates, which name the node) to dst.
func copyKeys(b testing.TB, src, dst string) {
	b.Helper()
	if err := os.MkdirAll(dst, 0o700); err != nil {
		b.Fatal(err)
	}
	for _, t := range secrets.HostKeyTypes {
		for _, f := range []string{"ssh_host_" + string(t) + "_key", "ssh_host_" + string(t) + "_key.pub"} {
			data, err := os.ReadFile(filepath.Join(src, f))
			if err == nil {
				err = os.WriteFile(filepath.Join(dst, f), data, 0o600)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// rendererOn renders from state, with room in the address plan for 200 computes.
func rendererOn(b testing.TB, state string) Renderer {
	b.Helper()
	sec, err := secrets.Open(state)
	if err != nil {
		b.Fatal(err)
	}
	cfg := config.Default()
	cfg.Network.Subnet = netip.MustParsePrefix("10.80.0.0/16")
	cfg.Compute.FirstAddress = netip.MustParseAddr("10.80.1.1")
	cfg.Compute.MaxNodes = 250
	return Renderer{Config: cfg, Secrets: sec, Templates: overlays.FS, BaseURL: "http://10.80.0.1"}
}

func timedRender(b testing.TB, r Renderer, nodes []inventory.Node) time.Duration {
	start := time.Now()
	renderOf(b, r, nodes, "c1")
	return time.Since(start)
}

// renderOf is node name's files, as one text.
func renderOf(tb testing.TB, r Renderer, nodes []inventory.Node, name string) string {
	tb.Helper()
	files, err := r.Render(nodes, name)
	if err != nil {
		tb.Fatal(err)
	}
	var out strings.Builder
	for _, f := range files {
		fmt.Fprintf(&out, "%s %o %d:%d\n%s\n", f.Path, f.Mode, f.UID, f.GID, f.Data)
	}
	return out.String()
}

// A running bootd, whose secrets store answers from memory, renders what one just started on the
// same state renders from the files: before and after a name changes machines.
func TestRenderFromMemoryMatchesFiles(t *testing.T) {
	state, nodes := clusterWithKeys(t, 3)
	warm := rendererOn(t, state)
	for _, step := range []string{"assigned", "c2 on another machine"} {
		if step != "assigned" {
			nodes[1].MAC, nodes[1].AssignedAt = "52:54:00:00:09:99", nodes[1].AssignedAt.Add(time.Hour)
		}
		for _, n := range nodes {
			got := renderOf(t, warm, nodes, n.Name)
			if want := renderOf(t, rendererOn(t, state), nodes, n.Name); got != want {
				t.Errorf("%s, %s: a running bootd renders other files than one just started", step, n.Name)
			}
		}
	}
}
