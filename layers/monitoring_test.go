package layers

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runMetricsScript runs one of the monitoring layer's collectors once, with stand-ins for the
// commands it asks (programs: name -> shell script), and returns what it wrote, checked by
// promtool (Debian's prometheus package) as node_exporter's textfile collector would parse it.
func runMetricsScript(t *testing.T, script, out string, programs map[string]string) string {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool (Debian package prometheus) is needed: ./scripts/setup-debian.sh installs it")
	}
	bin, dir := t.TempDir(), t.TempDir()
	for name, body := range programs {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", filepath.Join("files", "monitoring", script), "--once")
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "LAB_TEXTFILE_DIR=" + dir}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, b)
	}
	b, err := os.ReadFile(filepath.Join(dir, out))
	if err != nil {
		t.Fatal(err)
	}
	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = strings.NewReader(string(b))
	if res, err := check.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s\n%s", err, res, b)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	return string(b)
}

func TestGPUMetrics(t *testing.T) {
	tests := []struct {
		name      string
		smi       string
		want, not []string
	}{
		{"two GeForce cards, one without a power reading",
			"echo '0, NVIDIA GeForce RTX 3090, GPU-5a1f3c2e-1111-2222-3333-444455556666, 37, 12, 1024, 24576, 45, 113.45'\n" +
				"echo '1, NVIDIA GeForce RTX 3060, GPU-0b2c, 0, 0, 0, 12288, 30, [N/A]'\n",
			[]string{"nvidia_smi_up 1\n", `nvidia_gpu_info{gpu="0",name="NVIDIA GeForce RTX 3090",uuid="GPU-5a1f3c2e-1111-2222-3333-444455556666"} 1`,
				`nvidia_gpu_utilization_ratio{gpu="0"} 0.37`, `nvidia_gpu_memory_used_bytes{gpu="0"} 1073741824`,
				`nvidia_gpu_memory_total_bytes{gpu="1"} 12884901888`, `nvidia_gpu_power_watts{gpu="0"} 113.45`},
			[]string{`nvidia_gpu_power_watts{gpu="1"}`}},
		{"a name with quotes", `echo '0, Card "X" \ 1, GPU-1, 5, 5, 1, 2, 3, 4'` + "\n",
			[]string{`name="Card 'X' / 1"`}, nil},
		{"nvidia-smi fails (driver not loaded)", "echo 'NVIDIA-SMI has failed' >&2; exit 9\n",
			[]string{"nvidia_smi_up 0\n"}, []string{"nvidia_gpu_info"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runMetricsScript(t, "lab-gpu-metrics", "gpu.prom", map[string]string{"nvidia-smi": tt.smi})
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("lacks %s:\n%s", w, got)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(got, n) {
					t.Errorf("has %s:\n%s", n, got)
				}
			}
		})
	}
}

func TestSlurmMetrics(t *testing.T) {
	got := runMetricsScript(t, "lab-slurm-metrics", "slurm.prom", map[string]string{
		"squeue": "printf 'RUNNING\\nPENDING\\nPENDING\\nCOMPLETING\\n'\n",
		"sinfo":  "printf 'idle\\nidle\\nalloc\\nmix\\ndown*\\n'\n",
	})
	for _, w := range []string{"slurm_up 1\n", `slurm_jobs{state="pending"} 2`, `slurm_jobs{state="running"} 1`, `slurm_jobs{state="completing"} 1`,
		`slurm_nodes{state="idle"} 2`, `slurm_nodes{state="down"} 1`} {
		if !strings.Contains(got, w) {
			t.Errorf("lacks %s:\n%s", w, got)
		}
	}
	empty := runMetricsScript(t, "lab-slurm-metrics", "slurm.prom", map[string]string{"squeue": "exit 0\n", "sinfo": "exit 1\n"})
	for _, w := range []string{"slurm_up 0\n", `slurm_jobs{state="pending"} 0`, `slurm_jobs{state="running"} 0`} {
		if !strings.Contains(empty, w) {
			t.Errorf("with an empty queue and sinfo failing, lacks %s:\n%s", w, empty)
		}
	}
}
