package check

import (
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/inventory"
)

func TestSections(t *testing.T) {
	const m = "@@x"
	out := "noise\n\n@@x a\nline 1\nline 2\n@@x rc 0\n\n@@x b\n@@x rc 3\n\n@@x c\npartial"
	got := sections(m, out)
	if s := got["a"]; s.out != "line 1\nline 2" || s.rc != 0 {
		t.Errorf("a = %+v", s)
	}
	if s := got["b"]; s.out != "" || s.rc != 3 || s.ok() {
		t.Errorf("b = %+v", s)
	}
	if s := got["c"]; s.out != "partial" || s.rc != -1 {
		t.Errorf("c (never ended) = %+v", s)
	}
	if _, ok := got["noise"]; ok {
		t.Error("text before the first marker became a section")
	}
}

func TestGresGPUs(t *testing.T) {
	for gres, want := range map[string]int{"(null)": 0, "": 0, "gpu:2": 2, "gpu:rtx3090:2(S:0)": 2, "gpu:rtx3090:1,gpu:a4000:2": 3, "gpu:rtx3090": 1, "nic:1": 0} {
		if got := gresGPUs(gres); got != want {
			t.Errorf("gresGPUs(%q) = %d, want %d", gres, got, want)
		}
	}
}

func TestJudgeSlurmd(t *testing.T) {
	const line = "NodeName=c1 Arch=x86_64 CoresPerSocket=4 CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.00 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:rtx3090:2(S:0) NodeAddr=10.80.0.101 NodeHostName=c1 Version=22.05.9 OS=Linux 5.14.0-427.el9.x86_64 #1 SMP PREEMPT_DYNAMIC Wed Apr 10 2024 RealMemory=15866 AllocMem=0 FreeMem=15000 Sockets=1 Boards=1 State=%s ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=batch %s"
	gpus := []inventory.GPU{{Type: "rtx3090", File: "/dev/nvidia0"}, {Type: "rtx3090", File: "/dev/nvidia1"}}
	hw := &inventory.Hardware{CPUs: 8, RealMemoryMiB: 15866, GPUs: gpus}
	answers := map[string]section{Slurmd: {out: "Active Steps = NONE", rc: 0}}
	for _, tt := range []struct {
		name, state, reason string
		hw                  *inventory.Hardware
		node                map[string]section
		want                Status
		detail              string
	}{
		{name: "as reported", state: "IDLE+DYNAMIC_NORM", hw: hw, node: answers, want: Pass},
		{name: "mixed", state: "MIXED+DYNAMIC_NORM", hw: hw, node: answers, want: Pass},
		{name: "slurmd silent", state: "IDLE+DYNAMIC_NORM", hw: hw, node: map[string]section{Slurmd: {out: "slurm_load_slurmd_status: Connection refused", rc: 1}}, want: Fail, detail: "does not answer"},
		{name: "drained", state: "IDLE+DRAIN+DYNAMIC_NORM", reason: "Reason=Kill task failed [root@2026-11-27T10:00:00]", hw: hw, node: answers, want: Fail, detail: "(Kill task failed"},
		{name: "not responding", state: "IDLE*+DYNAMIC_NORM", hw: hw, node: answers, want: Fail, detail: "IDLE*"},
		{name: "fewer GPUs than reported", state: "IDLE+DYNAMIC_NORM", hw: &inventory.Hardware{CPUs: 8, RealMemoryMiB: 15866, GPUs: append(gpus, gpus[0])}, node: answers, want: Fail, detail: "2 GPUs (Gres=gpu:rtx3090:2(S:0)), reported 3"},
		{name: "other memory", state: "IDLE+DYNAMIC_NORM", hw: &inventory.Hardware{CPUs: 8, RealMemoryMiB: 32000, GPUs: gpus}, node: answers, want: Fail, detail: "15866 MiB of memory, reported 32000"},
		{name: "no report", state: "IDLE+DYNAMIC_NORM", node: answers, want: Fail, detail: "has not reported its hardware"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			slurm := parseSlurmNodes(strings.ReplaceAll(strings.ReplaceAll(line, "State=%s", "State="+tt.state), "%s", tt.reason))
			r := judgeSlurmd(inventory.Node{Name: "c1", State: inventory.StateReady, Hardware: tt.hw}, tt.node, slurm)
			if r.Status != tt.want || !strings.Contains(r.Detail, tt.detail) {
				t.Errorf("got %+v, want %s with %q", r, tt.want, tt.detail)
			}
		})
	}
	if r := judgeSlurmd(inventory.Node{Name: "c9", Hardware: hw}, answers, nil); r.Status != Fail || !strings.Contains(r.Detail, "does not list c9") {
		t.Errorf("unregistered node: %+v", r)
	}
}

func TestJudgeChrony(t *testing.T) {
	const tracking = "Reference ID    : %s\nStratum         : 11\nRef time (UTC)  : Fri Nov 27 13:44:01 2026\nLeap status     : %s\n"
	for _, tt := range []struct {
		name, ref, leap string
		want            Status
	}{
		{"follows the master", "0A500064 (10.80.0.100)", "Normal", Pass},
		{"not yet synchronised", "0A500064 (10.80.0.100)", "Not synchronised", Fail},
		{"follows another server", "C0A80101 (192.168.1.1)", "Normal", Fail},
		{"no source", "00000000 ()", "Not synchronised", Fail},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := strings.Replace(strings.Replace(tracking, "%s", tt.ref, 1), "%s", tt.leap, 1)
			r := judgeChrony("c1", "10.80.0.100", map[string]section{Chrony: {out: out, rc: 0}})
			if r.Status != tt.want {
				t.Errorf("got %+v, want %s", r, tt.want)
			}
		})
	}
}

func TestJudgeLmod(t *testing.T) {
	// Lmod 8.6's `module -t avail` in a login shell, printed after the MODULEPATH line.
	const avail = "MODULEPATH=/opt/software/modules/all:/usr/share/modulefiles\n/opt/software/modules/all:\nhello/\nhello/1.0\n/usr/share/lmod/lmod/modulefiles:\nCore/\nCore/lmod\n"
	for _, tt := range []struct {
		name   string
		out    string
		rc     int
		shared []string
		want   Status
	}{
		{"lists the shared modules", avail, 0, []string{"hello/1.0"}, Pass},
		{"empty tree", avail, 0, nil, Pass},
		{"a module missing", avail, 0, []string{"hello/1.0", "GCC/13.2.0"}, Fail},
		{"another tree's module", avail, 0, []string{"Core/lmod"}, Fail},
		{"no shared tree on the path", "MODULEPATH=/usr/share/modulefiles\n", 0, nil, Fail},
		{"no module command", "bash: line 1: module: command not found", 127, nil, Fail},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if r := judgeLmod("c1", map[string]section{Lmod: {out: tt.out, rc: tt.rc}}, tt.shared); r.Status != tt.want {
				t.Errorf("got %+v, want %s", r, tt.want)
			}
		})
	}
	if got := sharedModules(section{out: "./hello/1.0.lua\n./tcl/2.1\n"}); strings.Join(got, " ") != "hello/1.0 tcl/2.1" {
		t.Errorf("sharedModules = %q", got)
	}
	if got := sharedModules(section{out: "sh: cd: can't cd to /opt/software/modules/all", rc: 2}); got != nil {
		t.Errorf("sharedModules of a missing tree = %q", got)
	}
}

func TestJudgeGPUs(t *testing.T) {
	two := &inventory.Hardware{GPUs: []inventory.GPU{{Type: "rtx3090"}, {Type: "rtx3090"}}}
	smi := "GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-1)\nGPU 1: NVIDIA GeForce RTX 3090 (UUID: GPU-2)"
	for _, tt := range []struct {
		name string
		hw   *inventory.Hardware
		sec  section
		want Status
	}{
		{"no GPUs in gres", &inventory.Hardware{}, section{}, Skip},
		{"all visible", two, section{out: smi, rc: 0}, Pass},
		{"one lost", two, section{out: "GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-1)", rc: 0}, Fail},
		{"no driver", two, section{out: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", rc: 9}, Fail},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if r := judgeGPUs(inventory.Node{Name: "c1", Hardware: tt.hw}, map[string]section{GPUs: tt.sec}); r.Status != tt.want {
				t.Errorf("got %+v, want %s", r, tt.want)
			}
		})
	}
}
