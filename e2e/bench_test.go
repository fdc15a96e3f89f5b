//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
)

// TestBenchmarksRun runs `make bench`'s programs once each, small, so that a change which
// breaks them fails here rather than on the next person to measure: the image build benchmark
// with one run and a 64 MiB CUDA stand-in (the same code that makes the real-size one), the boot
// storm with 10 machines, two storms per server (two pairs, the servers in rotated order; the
// baseline's control storms too) and an 8 MiB root image, and the root storm with 3 nodes and a
// 24 MiB root. Their figures are
// not checked (the machine is shared); that every step ran, every machine finished and the
// report came out, is.
func TestBenchmarksRun(t *testing.T) {
	requirePrereqs(t, "go", "dnsmasq", "nginx", "ip")
	testrepo.NeedTools(t, "dnf", "modifyrepo_c", "mksquashfs", "cpio")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	t.Run("image builds", func(t *testing.T) {
		out := runBench(ctx, t, "../bench/imgbuild", "--tree", "..", "--runs", "1", "--payload-mib", "64", "--fs-gib", "4", "--payload-cache", t.TempDir())
		for _, want := range []string{"| full build, empty cache", "| nothing changed |", "| top layer (monitoring) edited: 1 of ", "| layer above nvidia-cuda (munge) edited: ",
			"| peak cache disk ≤ ", "unchanged rebuilds: identical"} {
			if !strings.Contains(out, want) {
				t.Errorf("report has no %q", want)
			}
		}
	})
	t.Run("boot storm", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "bootd")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/bootd").CombinedOutput(); err != nil {
			t.Fatalf("build bootd: %v\n%s", err, out)
		}
		out := runBench(ctx, t, "../bench/bootstorm", "--bootd", bin, "--n", "10", "--repeat", "2", "--rootfs-mib", "8")
		for _, want := range []string{"### N = 10", "| time until all N are done |", "| server peak RSS", "the median of the 2 pairs' ratios", "| control / baseline |"} {
			if !strings.Contains(out, want) {
				t.Errorf("report has no %q", want)
			}
		}
		if strings.Contains(out, "Failed machines") {
			t.Error("machines failed to boot in the storm (see the report)")
		}
	})
	t.Run("root storm", func(t *testing.T) {
		dir := t.TempDir()
		bin := filepath.Join(dir, "bootd")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/bootd").CombinedOutput(); err != nil {
			t.Fatalf("build bootd: %v\n%s", err, out)
		}
		fetch := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(dir, "bootd-fetch"), "../cmd/bootd-fetch")
		fetch.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := fetch.CombinedOutput(); err != nil {
			t.Fatalf("build bootd-fetch: %v\n%s", err, out)
		}
		out := runBench(ctx, t, "../bench/rootstorm", "--bootd", bin, "--n", "3", "--size-mib", "24", "--layer-mib", "1",
			"--rate-mbit", "200", "--baseline-secs", "2")
		for _, want := range []string{"| 3 |", "**Version update**", "whole-file fallbacks 0"} {
			if !strings.Contains(out, want) {
				t.Errorf("report has no %q", want)
			}
		}
	})
}

// runBench runs a benchmark program with go run and returns its report (standard output).
func runBench(ctx context.Context, t *testing.T, pkg string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", append([]string{"run", pkg}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	t.Logf("%s took %s; its progress:\n%s", pkg, time.Since(start).Round(time.Second), stderr.String())
	if err != nil {
		t.Fatalf("%s: %v\n%s", pkg, err, out)
	}
	t.Logf("report:\n%s", out)
	return string(out)
}
