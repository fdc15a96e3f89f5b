//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"os"
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
	"github.com/labcluster/gpucluster/internal/vcluster"
	"github.com/labcluster/gpucluster/overlays"
)

// TestCluster brings up a real Slurm 22.05 + munge cluster from the nodes' rendered files:
// master + c1..c3 in namespaces named after them, sinfo shows c[1-3] idle, srun -N3 hostname
// prints c1 c2 c3, a munge credential made on c1 decodes on the master (and one made with
// another key does not); then c4 joins with only its own files and srun -N4 reaches it.
func TestCluster(t *testing.T) {
	requirePrereqs(t, "ip", "nsenter", "setpriv", "munged", "munge", "unmunge", "slurmctld", "slurmd", "sinfo", "srun", "scontrol")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	dir := artifactDir(t)
	c, err := vcluster.New(ctx, vcluster.Config{
		Dir:      dir,
		Bridge:   netip.MustParsePrefix("10.80.0.1/24"),
		Accounts: layerAccounts(t, "munge", "slurm"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	defer logsOnFailure(t, dir)

	// The cluster as bootd first renders it: master + c1..c3 assigned.
	r := labRenderer(t, dir)
	inv := assigned(t, r.Config, "master", "c1", "c2", "c3")
	start := time.Now()
	for _, n := range inv {
		if _, err := c.Add(ctx, render(t, r, inv, n.Name)); err != nil {
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
	})

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
func logsOnFailure(t *testing.T, dir string) {
	if !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
	more, _ := filepath.Glob(filepath.Join(dir, "*", "upper/var/log/*/*"))
	for _, p := range append(logs, more...) {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		t.Logf("--- %s\n%s", strings.TrimPrefix(p, dir+"/"), strings.Join(lines, "\n"))
	}
}

// mungeID is the fixed munge uid/gid of layers/munge.toml.
const mungeID = 900

func mungeKey(key []byte) vcluster.File {
	return vcluster.File{Path: "/etc/munge/munge.key", Mode: 0o400, UID: mungeID, GID: mungeID, Data: key}
}

// labRenderer renders node files exactly as a running bootd does (its Renderer, its embedded
// overlays/ templates, a secrets store), with the reference lab's configuration except for the
// two Slurm settings that cgroups on a shared test host require (see config's [slurm]).
func labRenderer(t *testing.T, dir string) bootd.Renderer {
	t.Helper()
	cfg := config.Default()
	cfg.Slurm.ProctrackType, cfg.Slurm.TaskPlugin = "proctrack/linuxproc", "task/none"
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
