package check

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/labcluster/gpucluster/internal/inventory"
)

// The scripts run for real under the host's /bin/sh against stand-ins of the cluster's tools
// (ssh runs the node's script locally with NODE set; munge, scontrol, srun, chronyc, bash -l
// and cat answer as a healthy node would, or as a node with one thing broken, by $BROKEN).
var stubs = map[string]string{
	"ssh": `for a; do node=$a; shift; [ "$a" = "--" ] && { node=$1; break; }; done
case " $BROKEN " in *" $node:ssh "*) echo "ssh: connect to host $node port 22: Connection refused" >&2; exit 255;; esac
NODE=$node exec /bin/sh -s`,
	"munge": `case " $BROKEN " in *" ${NODE:-master}:munged "*) echo 'munge: Error: Failed to access "/run/munge/munge.socket.2"' >&2; exit 1;; esac
case " $BROKEN " in *" ${NODE:-master}:munge "*) echo "MUNGE:otherkey-$NODE:"; exit 0;; esac
echo "MUNGE:cred-${NODE:-master}:"`,
	"unmunge": `read c; case "$c" in MUNGE:cred-*) echo "STATUS:          Success (0)";; *) echo "STATUS:          Invalid credential (6)"; exit 6;; esac`,
	"scontrol": `case "$*" in
ping) echo "Slurmctld(primary) at master is UP";;
"-o show node") for n in c1 c2 c3; do
  st=IDLE+DYNAMIC_NORM; case " $BROKEN " in *" $n:down "*) st='DOWN*+DYNAMIC_NORM';; *" $n:asleep "*) st='IDLE+POWERED_DOWN+DYNAMIC_NORM';; esac
  echo "NodeName=$n Arch=x86_64 CoresPerSocket=2 CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.10 AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=10.80.0.10${n#c} NodeHostName=$n Version=22.05.8 OS=Linux 6.1.0-28-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22) RealMemory=24105 AllocMem=0 FreeMem=20000 Sockets=1 Boards=1 State=$st ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=batch Reason=Not responding [slurm@2026-11-27T13:00:00]"
done;;
"show slurmd") case " $BROKEN " in *" $NODE:slurmd "*) echo "slurm_load_slurmd_status: Connection refused"; exit 1;; esac; echo "Active Steps = NONE";;
*) exit 2;; esac`,
	"srun": `for a; do [ "$prev" = "-w" ] && list=$a; prev=$a; done
rc=0; for n in $(echo "$list" | tr , ' '); do
  case " $BROKEN " in *" $n:munge "*|*" $n:slurmd "*) echo "srun: error: Task launch failed on node $n: Invalid job credential"; rc=1;; esac
done
[ $rc = 0 ] && echo "$list" | tr , '\n'; exit $rc`,
	"chronyc": `case " $BROKEN " in *" $NODE:chrony "*) ref="0A500001 (10.80.0.1)";; *) ref="0A500064 (10.80.0.100)";; esac
printf 'Reference ID    : %s\nStratum         : 11\nLeap status     : Normal\n' "$ref"`,
	"bash": `case " $BROKEN " in *" $NODE:lmod "*) echo MODULEPATH=/usr/share/modulefiles; echo /usr/share/modulefiles:; exit 0;; esac
echo MODULEPATH=/opt/software/modules/all:/usr/share/modulefiles; echo /opt/software/modules/all:; echo hello/; echo hello/1.0`,
	"cat": `case "$1" in */home/.bootd-check) case " $BROKEN " in *" $NODE:home "*) echo "cat: $1: No such file or directory" >&2; exit 1;; esac;; esac
exec /bin/cat "$@"`,
}

// shMaster runs the scripts with the host's sh and the stubs first on PATH, and keeps them.
type shMaster struct {
	path, broken string
	mu           sync.Mutex
	scripts      []string
}

func (m *shMaster) Run(ctx context.Context, script string) (string, error) {
	m.mu.Lock()
	m.scripts = append(m.scripts, script)
	m.mu.Unlock()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-s")
	cmd.Env = []string{"PATH=" + m.path, "BROKEN=" + m.broken}
	cmd.Stdin = strings.NewReader(script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return string(out), nil
}

func TestRun(t *testing.T) {
	bin := t.TempDir()
	for name, body := range stubs {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hw := &inventory.Hardware{CPUs: 2, RealMemoryMiB: 24105}
	master := inventory.Node{Name: "master", Role: "master", Address: netip.MustParseAddr("10.80.0.100")}
	nodes := []inventory.Node{master}
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, inventory.Node{Name: fmt.Sprintf("c%d", i), Role: "compute", Address: netip.AddrFrom4([4]byte{10, 80, 0, byte(100 + i)}), Hardware: hw})
	}
	for _, tt := range []struct {
		name    string
		broken  string            // node:thing
		failed  map[string]string // node -> its failed checks, space-separated
		skipped string            // a node not checked
	}{
		{name: "healthy"},
		{name: "another munge key", broken: "c2:munge", failed: map[string]string{"c2": "munge srun"}},
		{name: "munged stopped", broken: "c1:munged", failed: map[string]string{"c1": "munge"}},
		{name: "slurmd stopped", broken: "c3:slurmd", failed: map[string]string{"c3": "slurmd srun"}},
		{name: "slurmd down in slurmctld", broken: "c3:down", failed: map[string]string{"c3": "slurmd srun"}},
		{name: "home not mounted", broken: "c2:home", failed: map[string]string{"c2": "nfs-home"}},
		{name: "chrony follows another", broken: "c1:chrony", failed: map[string]string{"c1": "chrony"}},
		{name: "lmod without the shared tree", broken: "c3:lmod", failed: map[string]string{"c3": "lmod"}},
		{name: "no ssh", broken: "c2:ssh", failed: map[string]string{"c2": "ssh munge slurmd srun nfs-home nfs-software chrony lmod gpus"}},
		{name: "two at once", broken: "c1:munge c3:slurmd", failed: map[string]string{"c1": "munge srun", "c3": "slurmd srun"}},
		// Switched off (so its ssh fails too): skipped, no failure.
		{name: "powered down by Slurm", broken: "c2:asleep c2:ssh", skipped: "c2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			roots := t.TempDir()
			for _, d := range []string{"home", "opt/software/modules/all/hello"} {
				if err := os.MkdirAll(filepath.Join(roots, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(roots, "opt/software/modules/all/hello/1.0.lua"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			m := &shMaster{path: bin + ":/usr/bin:/bin", broken: tt.broken}
			var progress []string
			r := Run(context.Background(), m, Options{Master: master, Nodes: nodes, roots: roots, Progress: func(s string) { progress = append(progress, s) }})
			if r.Passed != (len(tt.failed) == 0) {
				t.Errorf("report passed %v, want %v", r.Passed, len(tt.failed) == 0)
			}
			for _, n := range r.Nodes {
				var got []string
				for _, res := range n.Failed() {
					got = append(got, res.Check)
					if res.Detail == "" || res.Fix == "" || !strings.Contains(res.Detail+res.Fix, n.Name) {
						t.Errorf("%s %s: failure without the node's name, a detail or a fix: %+v", n.Name, res.Check, res)
					}
				}
				if want := strings.Fields(tt.failed[n.Name]); !slices.Equal(got, want) {
					t.Errorf("%s failed %q, want %q:\n%+v", n.Name, got, want, n.Results)
				}
				if n.Passed != (len(got) == 0 && n.Name != tt.skipped) || n.Skipped != (n.Name == tt.skipped) {
					t.Errorf("%s: passed %v, skipped %v, with failures %q", n.Name, n.Passed, n.Skipped, got)
				}
			}
			if left, _ := filepath.Glob(filepath.Join(roots, "*", tokenName)); len(left) > 0 {
				t.Errorf("tokens left behind: %v", left)
			}
			if len(progress) < 4 {
				t.Errorf("progress: %q", progress)
			}
			// The token in the shares, which every user of a node may read while the run lasts,
			// is not the marker that frames the output.
			marker := regexp.MustCompile(`(?m)^M='([^']+)'$`).FindStringSubmatch(m.scripts[0])
			token := regexp.MustCompile(`printf '%s\\n' '([^']+)' >`).FindStringSubmatch(m.scripts[0])
			if marker == nil || token == nil || strings.Contains(marker[1], token[1]) {
				t.Errorf("marker %q, token %q: want two random values\n%s", marker, token, m.scripts[0])
			}
		})
	}
}

// A master bootd cannot reach fails every node, each naming the master.
func TestRunMasterUnreachable(t *testing.T) {
	master := inventory.Node{Name: "master", Role: "master", Address: netip.MustParseAddr("10.80.0.100")}
	nodes := []inventory.Node{master, {Name: "c1", Role: "compute"}}
	r := Run(context.Background(), failing{}, Options{Master: master, Nodes: nodes})
	if r.Passed || len(r.Nodes) != 2 {
		t.Fatalf("report %+v", r)
	}
	for _, n := range r.Nodes {
		if f := n.Failed(); len(f) != 1 || f[0].Check != SSH || !strings.Contains(f[0].Detail, "master") {
			t.Errorf("%s: %+v", n.Name, n.Results)
		}
	}
}

type failing struct{}

func (failing) Run(context.Context, string) (string, error) {
	return "", errors.New("dial tcp 10.80.0.100:22: connect: no route to host")
}
