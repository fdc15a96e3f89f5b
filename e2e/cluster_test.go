//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/bootd"
	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/secrets"
	"github.com/labcluster/gpucluster/internal/spec"
	"github.com/labcluster/gpucluster/internal/testkit/vcluster"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
	"github.com/labcluster/gpucluster/overlays"
)

// TestCluster brings up a real Slurm + munge + chrony cluster from the nodes' rendered files.
// The Slurm is this machine's, Debian 12's slurm-wlm 22.05 (logged at the start), while the
// images run OpenHPC 3's slurm-ohpc 23.11 (layers/slurm.toml): the rendered files use nothing
// the two versions read differently (overlays/README.md), and this test checks them with 22.05.
// The cluster: master + c1..c3 in namespaces named after them, sinfo shows c[1-3] idle, srun -N3
// hostname prints c1 c2 c3, every compute's chronyd follows the master's, a munge credential
// made on c1 decodes on the master (and one made with another key does not), Lmod on c1 finds
// and loads a module installed on the master's shared tree, and a user's file written in their
// home on the master is theirs on c1; then c4 joins with only its own files and srun -N4
// reaches it, and c5, with two stand-in GPUs, registers them at its slurmd's first start.
// Monitoring runs for real beside it: bootd serves the service discovery, Prometheus
// (with the master's rendered configuration) finds every node by itself with up == 1, and c4 too,
// without an edit (monitoring_test.go).
func TestCluster(t *testing.T) {
	requirePrereqs(t, "ip", "nsenter", "setpriv", "munged", "munge", "unmunge", "slurmctld", "slurmd", "sinfo", "srun", "scontrol",
		"chronyd", "chronyc", "bash", "go", "wget", "curl", "busybox", "prometheus", "prometheus-node-exporter",
		"dbus-daemon", "firewalld", "firewall-cmd", "fail2ban-server", "fail2ban-client", "sshd", "ssh", "sysctl", "ss", "journalctl")
	requireFiles(t, lmodInit)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	if v, err := exec.CommandContext(ctx, "slurmctld", "-V").Output(); err == nil {
		t.Logf("Slurm under test: %s (the images run slurm-ohpc 23.11)", strings.TrimSpace(string(v)))
	}
	dir := artifactDir(t)
	c := newCluster(ctx, t, dir, labUser)

	// The cluster as bootd first renders it: master + c1..c3 assigned.
	r := labRenderer(t, dir)
	inv := assigned(t, r.Config, "master", "c1", "c2", "c3")
	start := time.Now()
	for _, n := range inv {
		nf := render(t, r, inv, n.Name)
		if n.Role == "master" {
			// The master's image has the login layer (firewalld, fail2ban) and journald.
			nf.Files, nf.Journal = append(nf.Files, loginLayerFiles(t)...), true
		}
		if _, err := c.Add(ctx, nf); err != nil {
			t.Fatal(err)
		}
	}
	master := c.Node("master")
	if err := c.WaitIdle(ctx, master, 90, "c1", "c2", "c3"); err != nil {
		t.Fatal(err)
	}
	t.Logf("master + c1..c3 up, c[1-3] idle: %s", time.Since(start).Round(100*time.Millisecond))
	out, _ := master.Run(ctx, "sinfo")
	t.Logf("sinfo:\n%s", out)

	mon := startMonitoring(ctx, t, c, dir, []string{"master", "c1", "c2", "c3"})
	t.Run("monitoring finds the nodes", func(t *testing.T) { mon.checkFound(ctx, t, master, "master", "c1", "c2", "c3") })

	computes := []*vcluster.Node{c.Node("c1"), c.Node("c2"), c.Node("c3")}
	t.Run("chrony", func(t *testing.T) { followMaster(ctx, t, c, r.Config.Master.Address, start, computes...) })
	t.Run("lmod", func(t *testing.T) { moduleFromMaster(ctx, t, master, c.Node("c1")) })
	t.Run("shared home", func(t *testing.T) { homeFromMaster(ctx, t, master, c.Node("c1")) })

	t.Run("srun", func(t *testing.T) { srunHostnames(ctx, t, master, nil, "c1", "c2", "c3") })
	// A user's job, not root's: nobody exists on every node (the host's passwd).
	t.Run("srun as user", func(t *testing.T) {
		srunHostnames(ctx, t, master, []string{"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"}, "c1", "c2", "c3")
	})

	t.Run("munge", func(t *testing.T) {
		cred, err := c.Node("c1").Run(ctx, "munge", "-n")
		if err != nil {
			t.Fatal(err)
		}
		if out, err := unmunge(ctx, master, cred); err != nil || !strings.Contains(out, "STATUS:          Success (0)") {
			t.Fatalf("credential from c1 on master: %v\n%s", err, out)
		}
		// A node with another key: its credentials must not decode on the master.
		other := make([]byte, 1024)
		if _, err := rand.Read(other); err != nil {
			t.Fatal(err)
		}
		x, err := c.Add(ctx, vcluster.NodeFiles{Name: "x9", Addr: netip.MustParsePrefix("10.80.0.199/24"), Files: []vcluster.File{mungeKey(other)}})
		if err != nil {
			t.Fatal(err)
		}
		cred, err = x.Run(ctx, "munge", "-n")
		if err != nil {
			t.Fatal(err)
		}
		if out, err := unmunge(ctx, master, cred); err == nil || !strings.Contains(out, "Invalid credential") {
			t.Fatalf("credential made with another key decoded on master (err %v):\n%s", err, out)
		}
		// The harness never adopts an existing namespace, its own included.
		if _, err := c.Add(ctx, vcluster.NodeFiles{Name: "x9", Addr: netip.MustParsePrefix("10.80.0.198/24")}); !errors.Is(err, vcluster.ErrExists) {
			t.Fatalf("second x9: %v, want ErrExists", err)
		}
		if _, err := x.Run(ctx, "munge", "-n"); err != nil {
			t.Fatalf("x9 after the refused Add: %v", err)
		}
	})

	// The master's firewall goes up (firewall_test.go): from here on, c4 joins, Slurm, chrony,
	// Prometheus and ssh reach the master through it.
	t.Run("firewall", func(t *testing.T) { masterFirewall(ctx, t, c) })

	// bootd assign c4: c4 gets its own files; nothing of the master is rendered again.
	t.Run("c4 joins", func(t *testing.T) {
		start := time.Now()
		if _, err := c.Add(ctx, render(t, r, assigned(t, r.Config, "master", "c1", "c2", "c3", "c4"), "c4")); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitIdle(ctx, master, 90, "c1", "c2", "c3", "c4"); err != nil {
			t.Fatal(err)
		}
		t.Logf("c4 idle %s after it started", time.Since(start).Round(100*time.Millisecond))
		// The master still has the files rendered before c4 existed: its /etc/hosts knows c4 from
		// the address plan, and slurmctld reaches c4 at the address it registered from.
		if hosts, err := os.ReadFile(master.Path("/etc/hosts")); err != nil || !strings.Contains(string(hosts), "10.80.0.104") {
			t.Errorf("master's /etc/hosts does not resolve c4 (%v):\n%s", err, hosts)
		}
		if out, err := master.Run(ctx, "scontrol", "show", "node", "c4"); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if strings.HasPrefix(f, "NodeAddr=") || strings.HasPrefix(f, "State=") {
					t.Logf("c4: %s", f)
				}
			}
		}
		srunHostnames(ctx, t, master, nil, "c1", "c2", "c3", "c4")
		if err := c.WaitTime(ctx, r.Config.Master.Address, 90, c.Node("c4")); err != nil {
			t.Fatal(err)
		}
		t.Logf("c4 follows the master's clock %s after it started", time.Since(start).Round(100*time.Millisecond))
	})

	// bootd assign c4: Prometheus scrapes it without an edit of its configuration.
	t.Run("monitoring finds c4", func(t *testing.T) {
		start := time.Now()
		mon.assign(ctx, t, c.Node("c4"))
		startNodeExporter(ctx, t, c.Node("c4"))
		waitUp(ctx, t, master, 60, "master", "c1", "c2", "c3", "c4")
		t.Logf("Prometheus finds c4, assigned later, up == 1: %s after the assign", time.Since(start).Round(100*time.Millisecond))
	})

	// A GPU node's first boot: its first overlay (before it could report) has no GPUs; bootd-node
	// report then posts slurmd -C and nvidia-smi's GPU names before slurmd starts, bootd answers
	// "changed", and the node fetches its files again (layers/ tests that step). slurmd's first
	// start reads those files, with stand-in /dev/nvidia0 and /dev/nvidia1, and registers c5
	// with both GPUs: a job asking for them runs there at once, no reboot.
	t.Run("gpu node's first boot", func(t *testing.T) { gpuFirstBoot(ctx, t, c, r) })

	// Root on the master reaches every node by name over SSH without a password, with strict
	// host key checking: c1..c3 through the keys in its known_hosts and the host CA, c4 (assigned
	// after the master's files were rendered) through the host CA alone. pdsh fans out the same.
	t.Run("ssh and pdsh from the master", func(t *testing.T) {
		for _, name := range []string{"c1", "c2", "c3", "c4"} {
			startSSHD(ctx, t, name, c.Node(name))
		}
		out, err := master.Run(ctx, "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10", "c4", "hostname")
		if err != nil || strings.TrimSpace(string(out)) != "c4" {
			t.Fatalf("ssh c4 hostname: %v\n%s", err, out)
		}
		out, err = master.Run(ctx, "pdsh", "-R", "ssh", "-w", "c[1-4]", "hostname")
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		slices.Sort(lines)
		if want := []string{"c1: c1", "c2: c2", "c3: c3", "c4: c4"}; err != nil || !slices.Equal(lines, want) {
			t.Fatalf("pdsh -w c[1-4] hostname: %v\n%s\nwant %q", err, out, want)
		}
		t.Logf("pdsh -R ssh -w c[1-4] hostname:\n%s", out)
	})
}

// gpuFirstBoot brings up c5 with two stand-in GPUs the way its first boot goes (see TestCluster).
func gpuFirstBoot(ctx context.Context, t *testing.T, c *vcluster.Cluster, r bootd.Renderer) {
	nodes := assigned(t, r.Config, "master", "c1", "c2", "c3", "c4", "c5")
	first := render(t, r, nodes, "c5")
	if gres := fileOf(first, "/etc/slurm/gres.conf"); strings.Contains(gres, "Name=gpu") {
		t.Fatalf("c5's overlay before its report names GPUs:\n%s", gres)
	}
	// The report: this machine's slurmd -C line (c5's namespace sees the same CPUs and memory)
	// and the stand-in nvidia-smi's two GPUs, recorded as bootd records it.
	line, err := exec.CommandContext(ctx, "slurmd", "-C").Output()
	if err != nil {
		t.Fatal(err)
	}
	report, err := json.Marshal(map[string]any{"slurmd_c": strings.SplitN(string(line), "\n", 2)[0],
		"gpus": []string{"NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090"}})
	if err != nil {
		t.Fatal(err)
	}
	hw, err := bootd.HardwareFromReport(report)
	if err != nil {
		t.Fatal(err)
	}
	nodes[len(nodes)-1].Hardware = &hw
	again := render(t, r, nodes, "c5")
	opts := fileOf(again, "/etc/sysconfig/slurmd")
	if !strings.Contains(opts, "Gres=gpu:rtx3090:2") {
		t.Fatalf("c5's slurmd options after its report:\n%s", opts)
	}
	again.Devices = []vcluster.Device{{Path: "/dev/nvidia0", Major: 195, Minor: 0}, {Path: "/dev/nvidia1", Major: 195, Minor: 1}}
	start := time.Now()
	if _, err := c.Add(ctx, again); err != nil {
		t.Fatal(err)
	}
	master := c.Node("master")
	if err := c.WaitIdle(ctx, master, 90, "c5"); err != nil {
		t.Fatal(err)
	}
	out, err := master.Run(ctx, "scontrol", "show", "node", "c5")
	if err != nil || !strings.Contains(string(out), "Gres=gpu:rtx3090:2") {
		t.Fatalf("c5 registered without its GPUs (%v):\n%s", err, out)
	}
	t.Logf("c5 idle with Gres=gpu:rtx3090:2 %s after its slurmd's first start", time.Since(start).Round(100*time.Millisecond))
	out, err = master.Run(ctx, "srun", "-w", "c5", "--gres=gpu:rtx3090:2", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES; ls -l /dev/nvidia0 /dev/nvidia1")
	if err != nil || !strings.HasPrefix(string(out), "0,1\n") {
		t.Fatalf("srun --gres=gpu:rtx3090:2 on c5: %v\n%s", err, out)
	}
	t.Logf("srun -w c5 --gres=gpu:rtx3090:2: CUDA_VISIBLE_DEVICES and the stand-in devices:\n%s", out)
}

// fileOf is the content of the file at path in a node's rendered files ("" when it has none).
func fileOf(nf vcluster.NodeFiles, path string) string {
	for _, f := range nf.Files {
		if f.Path == path {
			return string(f.Data)
		}
	}
	return ""
}

// followMaster waits until every compute's chronyd has selected the master's and synchronised to
// it, then checks that the master's chronyd has served each of them, and that the master itself,
// which keeps its own clock, does not pass the computes' check.
func followMaster(ctx context.Context, t *testing.T, c *vcluster.Cluster, master netip.Addr, since time.Time, computes ...*vcluster.Node) {
	t.Helper()
	m := c.Node("master")
	// Tests reach no outside address: the master's rendered chrony.conf names no source.
	if conf, err := os.ReadFile(m.Path("/etc/chrony.conf")); err != nil || strings.Contains(string(conf), "\npool ") || strings.Contains(string(conf), "\nserver ") {
		t.Fatalf("master's chrony.conf names an upstream source (%v):\n%s", err, conf)
	}
	if err := c.WaitTime(ctx, master, 90, computes...); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range computes {
		names = append(names, n.Name)
	}
	t.Logf("%s follow the master's clock (%s): %s after the nodes started", strings.Join(names, " "), master, time.Since(since).Round(100*time.Millisecond))
	for _, n := range computes {
		tr, err := n.FollowsTime(ctx, master)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: reference ID %s (%s), stratum %d, leap status %s", n.Name, tr.RefID, tr.RefName, tr.Stratum, tr.Leap)
	}
	out, _ := computes[0].Run(ctx, "chronyc", "-n", "sources")
	t.Logf("%s: chronyc -n sources:\n%s", computes[0].Name, out)

	clients, out2, err := m.NTPClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range computes {
		if clients[n.Addr.Addr()] == 0 {
			t.Errorf("master's chronyd answered no NTP request from %s (%s):\n%s", n.Name, n.Addr.Addr(), out2)
		}
	}
	t.Logf("master: chronyc -n clients:\n%s", out2)
	// The master serves its own clock (ntp_servers = [], local stratum 10): synchronised, but to
	// no server. The check must tell that apart from following the master.
	if tr, err := m.FollowsTime(ctx, master); err == nil {
		t.Errorf("master passes as following %s with reference ID %s (%s)", master, tr.RefID, tr.RefName)
	}
}

// lmodInit is Debian's Lmod shell setup (the image's lmod-ohpc has its own under /opt/ohpc).
const lmodInit = "/usr/share/lmod/lmod/init/bash"

// moduleFromMaster installs a module into the master's shared software tree (as EasyBuild
// would: a program under /opt/software, its modulefile under modules/all, the directory the
// master's tmpfiles.d created), then on the compute runs a login shell's module setup with the
// rendered /etc/profile.d/modulepath.sh: module avail lists it and module load puts it on PATH.
func moduleFromMaster(ctx context.Context, t *testing.T, master, compute *vcluster.Node) {
	t.Helper()
	if st, err := os.Stat(master.Path("/opt/software/modules/all")); err != nil || !st.IsDir() {
		t.Fatalf("master has no /opt/software/modules/all (tmpfiles.d): %v", err)
	}
	if fstab, err := os.ReadFile(compute.Path("/etc/bootd/fstab")); err != nil || !strings.Contains(string(fstab), "master:/opt/software") {
		t.Fatalf("%s's rendered /etc/bootd/fstab does not mount master:/opt/software (%v):\n%s", compute.Name, err, fstab)
	}
	files := []vcluster.File{
		{Path: "/opt/software/hello/1.0/bin/hello", Mode: 0o755, Data: []byte("#!/bin/sh\necho \"hello from $(hostname)\"\n")},
		{Path: "/opt/software/modules/all/hello/1.0.lua", Mode: 0o644,
			Data: []byte("help([[hello: says where it runs]])\nprepend_path(\"PATH\", \"/opt/software/hello/1.0/bin\")\n")},
	}
	for _, f := range files {
		p := master.Path(f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, f.Mode); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	script := "source " + lmodInit + "; source /etc/profile.d/modulepath.sh; module -t avail 2>&1; module load hello && hello"
	out, err := compute.Run(ctx, "bash", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if !slices.Contains(lines, "hello/1.0") || lines[len(lines)-1] != "hello from "+compute.Name {
		t.Fatalf("on %s, module avail does not list hello/1.0 or module load hello; hello did not run there:\n%s", compute.Name, out)
	}
	t.Logf("%s: module -t avail lists hello/1.0; module load hello; hello: %q in %s", compute.Name, lines[len(lines)-1], time.Since(start).Round(10*time.Millisecond))
}

// labUser is a lab member, with the same ids on every node (as a directory service would give).
var labUser = vcluster.Account{Name: "labuser", UID: 5001, GID: 5001, Home: "/home/labuser"}

// homeFromMaster creates the user's home on the master as root would (useradd -m), has the
// user write a file there, and reads it on the compute: owned by the user, readable by the
// user, not by another one.
func homeFromMaster(ctx context.Context, t *testing.T, master, compute *vcluster.Node) {
	t.Helper()
	as := func(user string, args ...string) []string {
		return append([]string{"setpriv", "--reuid=" + user, "--regid=" + user, "--init-groups", "--"}, args...)
	}
	home, note := labUser.Home, labUser.Home+"/note"
	if out, err := master.Run(ctx, "install", "-d", "-m", "0700", "-o", labUser.Name, "-g", labUser.Name, home); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := master.Run(ctx, as(labUser.Name, "sh", "-c", "echo \"written on $(hostname)\" > "+note)...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := compute.Run(ctx, "stat", "-c", "%U:%G %a", note)
	if got := strings.TrimSpace(string(out)); err != nil || got != "labuser:labuser 644" {
		t.Fatalf("on %s, %s is %q (%v), want labuser:labuser 644", compute.Name, note, got, err)
	}
	out, err = compute.Run(ctx, as(labUser.Name, "cat", note)...)
	if got := strings.TrimSpace(string(out)); err != nil || got != "written on master" {
		t.Fatalf("on %s, %s reads %q to its owner (%v), want \"written on master\"", compute.Name, note, got, err)
	}
	if out, err := compute.Run(ctx, as("nobody", "cat", note)...); err == nil {
		t.Fatalf("on %s, nobody reads %s in a 0700 home:\n%s", compute.Name, note, out)
	}
	t.Logf("%s: %s written by %s on the master reads \"written on master\" to its owner on %s", compute.Name, note, labUser.Name, compute.Name)
}

// startSSHD starts the node's sshd (it daemonizes into the node's PID namespace, whose end
// stops it) and waits until it accepts connections.
func startSSHD(ctx context.Context, t *testing.T, name string, n *vcluster.Node) {
	t.Helper()
	if out, err := n.Run(ctx, "sh", "-c", "mkdir -p /run/sshd && /usr/sbin/sshd -E /var/log/sshd.log"); err != nil {
		t.Fatalf("sshd on %s: %v\n%s", name, err, out)
	}
	for i := 0; i < 50; i++ {
		if out, err := n.Run(ctx, "ss", "-Hltn", "sport", "=", ":22"); err == nil && len(strings.TrimSpace(string(out))) > 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("sshd on %s does not listen", name)
}

// srunHostnames runs `srun -N<len(want)> hostname` on the master and checks that each node
// answered with its own name.
func srunHostnames(ctx context.Context, t *testing.T, master *vcluster.Node, as []string, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	var stdout, stderr strings.Builder
	cmd := master.Command(ctx, append(as, "srun", fmt.Sprintf("-N%d", len(want)), "hostname")...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("srun: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	got := strings.Fields(stdout.String())
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("srun -N%d hostname printed %q, want %q\n%s", len(want), got, want, stderr.String())
	}
	t.Logf("srun -N%d hostname: %s in %s", len(want), strings.Join(got, " "), time.Since(start).Round(10*time.Millisecond))
}

func unmunge(ctx context.Context, n *vcluster.Node, cred []byte) (string, error) {
	cmd := n.Command(ctx, "unmunge")
	cmd.Stdin = strings.NewReader(string(cred))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// layerAccounts returns the fixed-id users the image's layers create.
func layerAccounts(t *testing.T, layers ...string) []vcluster.Account {
	t.Helper()
	var accounts []vcluster.Account
	for _, name := range layers {
		l, err := spec.LoadLayer(filepath.Join("..", "layers", name+".toml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range l.Users {
			accounts = append(accounts, vcluster.Account{Name: u.Name, UID: u.UID, GID: u.GID, Home: u.Home})
		}
	}
	return accounts
}

// logsOnFailure prints the tail of every node's daemon logs under dir when t failed, also
// of a node whose Add failed (the harness removed it, its directory stays).
// newCluster starts an empty virtual cluster in dir on the lab's bridge (10.80.0.1/24), with the
// layers' munge and slurm accounts and the extra ones. When the test ends its logs are shown if
// it failed, then it is closed.
func newCluster(ctx context.Context, t *testing.T, dir string, extra ...vcluster.Account) *vcluster.Cluster {
	t.Helper()
	c, err := vcluster.New(ctx, vcluster.Config{Dir: dir, Bridge: netip.MustParsePrefix("10.80.0.1/24"),
		Accounts: append(layerAccounts(t, "munge", "slurm"), extra...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { logsOnFailure(t, dir) })
	return c
}

func logsOnFailure(t *testing.T, dir string) {
	if !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
	more, _ := filepath.Glob(filepath.Join(dir, "*", "upper/var/log/*/*"))
	for _, p := range append(logs, more...) {
		if fi, err := os.Stat(p); err == nil && fi.Size() > 0 {
			t.Logf("--- %s\n%s", strings.TrimPrefix(p, dir+"/"), vlab.TailFile(p, 25))
		}
	}
}

// mungeID is the fixed munge uid/gid of layers/munge.toml.
const mungeID = 900

func mungeKey(key []byte) vcluster.File {
	return vcluster.File{Path: "/etc/munge/munge.key", Mode: 0o400, UID: mungeID, GID: mungeID, Data: key}
}

// labRenderer renders node files exactly as a running bootd does (its Renderer, its embedded
// overlays/ templates, a secrets store), with the reference lab's configuration except for the
// two Slurm settings that cgroups on a shared test host require (see config's [slurm]), and no
// upstream time servers: tests reach no outside address, so the master serves its own clock.
func labRenderer(t *testing.T, dir string) bootd.Renderer {
	t.Helper()
	cfg := config.Default()
	cfg.Slurm.ProctrackType, cfg.Slurm.TaskPlugin = "proctrack/linuxproc", "task/none"
	cfg.Master.NTPServers = []string{}
	sec, err := secrets.Open(filepath.Join(dir, "bootd-state"))
	if err != nil {
		t.Fatal(err)
	}
	return bootd.Renderer{Config: cfg, Secrets: sec, Templates: overlays.FS, BaseURL: "http://10.80.0.1"}
}

// assigned is the inventory after `bootd assign` of each name, addresses placed by the config.
func assigned(t *testing.T, cfg config.Config, names ...string) []inventory.Node {
	t.Helper()
	var nodes []inventory.Node
	for i, name := range names {
		p, err := cfg.Place(name)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, inventory.Node{Name: name, Role: p.Role, Address: p.Address, MAC: fmt.Sprintf("52:54:00:c1:00:%02x", i+1), State: inventory.StateAssigned})
	}
	return nodes
}

// render turns node name's rendered overlay into the harness's file set.
func render(t *testing.T, r bootd.Renderer, nodes []inventory.Node, name string) vcluster.NodeFiles {
	t.Helper()
	files, err := r.Render(nodes, name)
	if err != nil {
		t.Fatal(err)
	}
	nf := vcluster.NodeFiles{Name: name}
	for _, n := range nodes {
		if n.Name == name {
			nf.Role, nf.Addr = n.Role, netip.PrefixFrom(n.Address, r.Config.Network.Subnet.Bits())
		}
	}
	for _, f := range files {
		nf.Files = append(nf.Files, vcluster.File{Path: f.Path, Mode: f.Mode, UID: f.UID, GID: f.GID, Data: f.Data})
	}
	return nf
}
