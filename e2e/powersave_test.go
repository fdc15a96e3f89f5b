//go:build e2e

package e2e

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/bootd"
	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/power"
	"github.com/labcluster/gpucluster/internal/secrets"
	"github.com/labcluster/gpucluster/internal/testkit/artifacttest"
	"github.com/labcluster/gpucluster/internal/testkit/vbmc"
	"github.com/labcluster/gpucluster/internal/testkit/vcluster"
	"github.com/labcluster/gpucluster/overlays"
)

// TestSlurmPowerSaving: Slurm 22.05's power saving with exactly the files bootd renders, and
// bootd switching the node through its BMC. master and c1 run real munge and Slurm in their
// namespaces; c1's BMC is ipmi_sim on the segment, and its power is c1's namespace: off kills
// every process of c1 and deletes its network namespace, on brings it up from scratch as a
// netbooted node boots (fresh layers, its files, its daemons; it tells bootd it is up). c1,
// idle past suspend_time, is suspended: slurmctld runs the rendered SuspendProgram, which asks
// bootd as root on the master, and bootd switches c1's BMC off. A job for c1 resumes it the
// same way, and runs once c1's slurmd registers again.
func TestSlurmPowerSaving(t *testing.T) {
	requirePrereqs(t, "ip", "nsenter", "setpriv", "munged", "slurmctld", "slurmd", "sinfo", "srun", "scontrol",
		"chronyd", "sudo", "curl", "unshare", "ipmi_sim", "ipmitool")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dir := artifactDir(t)
	c := newCluster(ctx, t, dir)

	// bootd's config: the two Slurm settings a shared test host needs, no upstream time,
	// suspend after 15 s idle (a lab would wait far longer), c1's BMC.
	bootdDir := filepath.Join(dir, "bootd")
	if err := os.MkdirAll(bootdDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfgPath := writeConfig(t, bootdDir, `[master]
ntp_servers = []

[slurm]
proctrack_type = "proctrack/linuxproc"
task_plugin = "task/none"
suspend_time = "15s"
suspend_timeout = "5s"
resume_timeout = "3m"

[bmc.c1]
address = "10.80.0.11"
user = "admin"
`)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	macs := map[string]string{"master": "52:54:00:c1:00:01", "c1": "52:54:00:c1:00:02"}
	inv := seedInventory(t, filepath.Join(bootdDir, "state"), cfg, macs)
	sec, err := secrets.Open(filepath.Join(bootdDir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	r := bootd.Renderer{Config: cfg, Secrets: sec, Templates: overlays.FS, BaseURL: "http://10.80.0.1"}
	files := map[string]vcluster.NodeFiles{}
	for _, n := range inv {
		nf := render(t, r, inv, n.Name)
		nf.MAC = mustMAC(n.MAC)
		files[n.Name] = nf
	}

	// c1's BMC, on a host of the segment; c1 runs, so its power is on.
	bmcHost, err := c.Hub().AddHost(ctx, "bmc", mustMAC("52:54:00:b1:00:01"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := bmcHost.Run(ctx, "ip", "addr", "add", "10.80.0.11/24", "dev", "eth0"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	bmc, err := vbmc.Start(ctx, bmcHost, vbmc.Config{Name: "c1", Dir: filepath.Join(dir, "bmc-c1"),
		Addr: netip.MustParseAddrPort("10.80.0.11:623"), User: "admin", Password: "c1-bmc", On: true})
	if err != nil {
		t.Fatal(err)
	}

	// What c1 boots, as far as bootd knows: an image version it verifies.
	for _, image := range []string{"master", "compute"} {
		artifacttest.Publish(t, filepath.Join(bootdDir, "images"), image, "1")
	}
	bin := filepath.Join(dir, "bootd-bin")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/bootd").CombinedOutput(); err != nil {
		t.Fatalf("build bootd: %v\n%s", err, out)
	}
	b, err := c.Hub().StartBootd(ctx, bin, bootdDir, "--config", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logTailOnFailure(t, b.Proc.LogPath)
	if out, err := b.CLIInput(ctx, "c1-bmc\n", "power", "password", "c1"); err != nil {
		t.Fatalf("bootd power password c1: %v\n%s", err, out)
	}

	for _, name := range []string{"master", "c1"} {
		if _, err := c.Add(ctx, files[name]); err != nil {
			t.Fatal(err)
		}
	}
	master := c.Node("master")
	if err := c.WaitIdle(ctx, master, 90, "c1"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()

	// c1's power is its namespace: the BMC's chassis drives it.
	follow := &powerFollower{t: t, c: c, files: files["c1"], boots: make(chan error, 4)}
	go bmc.Watch(ctx, follow.changed)

	t.Run("an idle compute is suspended", func(t *testing.T) {
		state := waitNodeState(ctx, t, master, "c1", 120, func(s string) bool { return s == "idle~" })
		t.Logf("c1 %s %s after it went idle; its BMC was asked %q", state, time.Since(start).Round(time.Second), bmc.Sets())
		if on, _ := bmc.Power(); on || !slices.Equal(bmc.Sets(), []string{"set power 0"}) {
			t.Fatalf("c1's BMC: power on %v, asked %q; want switched off once", on, bmc.Sets())
		}
		if c.Node("c1") != nil {
			t.Fatal("c1's namespace still runs with its BMC off")
		}
		logHas(t, b.Proc.LogPath, `msg="power action" action=off by=master nodes=c1`)
	})

	t.Run("a job resumes it and runs", func(t *testing.T) {
		resumed := time.Now()
		jctx, jcancel := context.WithTimeout(ctx, 4*time.Minute)
		defer jcancel()
		out, err := master.Run(jctx, "srun", "-w", "c1", "hostname")
		if err != nil || strings.TrimSpace(string(out)) != "c1" {
			t.Fatalf("srun -w c1 hostname: %v\n%s", err, out)
		}
		t.Logf("srun -w c1 hostname printed c1 %s after it was submitted; c1's BMC was asked %q", time.Since(resumed).Round(time.Second), bmc.Sets())
		if on, _ := bmc.Power(); !on || !slices.Equal(bmc.Sets(), []string{"set power 0", "set power 1"}) {
			t.Fatalf("c1's BMC: power on %v, asked %q; want off then on", on, bmc.Sets())
		}
		if err := follow.lastBoot(); err != nil {
			t.Fatal(err)
		}
		logHas(t, b.Proc.LogPath, `msg="power action" action=on by=master nodes=c1`)
		nodes, err := b.Nodes(ctx)
		if err != nil || nodes.Power["c1"].State != power.StateOn {
			t.Fatalf("bootd nodes: c1's power %+v, %v", nodes.Power["c1"], err)
		}
	})
}

// powerFollower keeps c1's namespace in step with its BMC's power.
type powerFollower struct {
	t     *testing.T
	c     *vcluster.Cluster
	files vcluster.NodeFiles
	mu    sync.Mutex
	boots chan error
}

func (f *powerFollower) changed(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !on {
		if n := f.c.Node(f.files.Name); n != nil {
			if err := f.c.Remove(n); err != nil {
				f.t.Errorf("power off %s: %v", f.files.Name, err)
			}
		}
		return
	}
	// A PC's firmware takes a while before its OS boots: slurmctld takes the node for resumed
	// only when it booted after it was asked to (a node whose boot time is older did not).
	time.Sleep(2 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := f.c.Add(ctx, f.files)
	if err == nil {
		// As a booting node's bootd-node does once up: it tells bootd from its address and a
		// privileged port (bootd identifies hello as it does the overlay's requests).
		_, err = n.Run(ctx, "curl", "-fsS", "--max-time", "10", "--local-port", "600-1023", "http://10.80.0.1/api/v1/hello")
	}
	f.boots <- err
}

// lastBoot is the outcome of the first power-on's boot, waiting a little for it.
func (f *powerFollower) lastBoot() error {
	select {
	case err := <-f.boots:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("no boot followed the BMC's power on")
	}
}

// waitNodeState polls sinfo on the controller until node's state satisfies ok, and returns it.
func waitNodeState(ctx context.Context, t *testing.T, controller *vcluster.Node, node string, tries int, ok func(string) bool) string {
	t.Helper()
	var last string
	for range tries {
		out, err := controller.Run(ctx, "sinfo", "--noheader", "--Node", "--nodes="+node, "--format=%t")
		last = strings.TrimSpace(string(out))
		if err == nil && ok(last) {
			return last
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: state %q: %v", node, last, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	t.Fatalf("%s still %q after %d s", node, last, tries)
	return ""
}

// logHas fails unless the file holds s.
func logHas(t *testing.T, path, s string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), s) {
		t.Errorf("%s lacks %q (%v)", filepath.Base(path), s, err)
	}
}
