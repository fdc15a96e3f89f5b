//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/check"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/testkit/vcluster"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// TestLabAtWork is the lab as its users and its admin meet it once bootd has brought it up.
// master, c1, c2 and c3 netboot as PCs do against a running bootd (a PXE DHCP lease, the
// discovery script: waiting), are assigned, take their static addresses and fetch their
// overlays; the nodes then run with exactly those files (real Slurm 22.05, munge, chrony and
// sshd per node namespace) and report themselves with bootd-node's own hello and report.
// Then:
//   - an MPI job (Open MPI, built with mpicc in the user's NFS home) runs across the three
//     computes started by plain srun, wired up by PMIx (slurm.conf's MpiDefault);
//   - a PyTorch DistributedDataParallel job, submitted by sbatch, runs torchrun on the three
//     computes over gloo, reads its script from the user's home and prints the same all-reduced
//     value and the same weights on every rank;
//   - `bootd check` passes on every node and `bootd nodes` shows them validated;
//   - with one thing broken on purpose at a time (the master's /home export, c3's slurmd, c1's
//     munge key) `bootd check` fails, naming that node and that check, and the others pass.
func TestLabAtWork(t *testing.T) {
	requirePrereqs(t, "ip", "nsenter", "setpriv", "munged", "slurmctld", "slurmd", "srun", "sbatch", "chronyd", "sshd",
		"busybox", "curl", "tar", "mpicc", "torchrun", "go")
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	dir := artifactDir(t)
	c := newCluster(ctx, t, dir, labUser)
	b := startLabBootd(ctx, t, c.Hub(), dir)
	defer logTailOnFailure(t, b.Proc.LogPath)

	start := time.Now()
	names := []string{"master", "c1", "c2", "c3"}
	files := netbootAll(ctx, t, c.Hub(), b, dir, names)
	t.Logf("master, c1..c3 netbooted, assigned and fetched their overlays from bootd: %s", time.Since(start).Round(100*time.Millisecond))
	for i, name := range names {
		role := "compute"
		if name == "master" {
			role = "master"
		}
		nf := vcluster.NodeFiles{Name: name, Role: role, Addr: netip.MustParsePrefix(fmt.Sprintf("10.80.0.%d/24", 100+i)), MAC: mustMAC(labMAC(i)), Files: files[name]}
		n, err := c.Add(ctx, nf)
		if err != nil {
			t.Fatal(err)
		}
		runBootdNode(ctx, t, n, "hello", "report")
		startSSHD(ctx, t, name, n)
	}
	master, computes := c.Node("master"), []*vcluster.Node{c.Node("c1"), c.Node("c2"), c.Node("c3")}
	if err := c.WaitIdle(ctx, master, 90, "c1", "c2", "c3"); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitTime(ctx, netip.MustParseAddr("10.80.0.100"), 90, computes...); err != nil {
		t.Fatal(err)
	}
	t.Logf("nodes up, c[1-3] idle, their clocks follow the master: %s", time.Since(start).Round(100*time.Millisecond))
	wantStates(ctx, t, b, inventory.StateReady, names...)

	makeHome(ctx, t, master)
	installModule(t, master)
	t.Run("mpi across three nodes by srun", func(t *testing.T) { mpiJob(ctx, t, master) })
	t.Run("pytorch ddp across three nodes by sbatch", func(t *testing.T) { ddpJob(ctx, t, master) })

	t.Run("check passes and validates", func(t *testing.T) {
		r := runCheck(ctx, t, b)
		failures(t, r, nil)
		wantStates(ctx, t, b, inventory.StateValidated, names...)
	})
	t.Run("home export broken on the master", func(t *testing.T) {
		// The master's /home is no longer what it exports: an empty file system over it, as
		// after a lost data disk. Every compute's /home then misses what the master writes.
		if out, err := master.Run(ctx, "mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/home"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		r := runCheck(ctx, t, b)
		failures(t, r, map[string][]string{"c1": {check.Home}, "c2": {check.Home}, "c3": {check.Home}})
		if out, err := master.Run(ctx, "umount", "/home"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	})
	t.Run("slurmd stopped on c3", func(t *testing.T) {
		if err := c.Node("c3").Stop(ctx, "slurmd"); err != nil {
			t.Fatal(err)
		}
		r := runCheck(ctx, t, b)
		failures(t, r, map[string][]string{"c3": {check.Slurmd, check.Srun}})
		wantStates(ctx, t, b, inventory.StateReady, "c3")
		wantStates(ctx, t, b, inventory.StateValidated, "master", "c1", "c2")
		out, _ := b.CLI(ctx, "check", "c3")
		t.Logf("bootd check c3:\n%s", out)
		if !strings.Contains(out, "c3 slurmd: FAIL") || !strings.Contains(out, "fix: start it: `systemctl restart slurmd` on c3") {
			t.Errorf("bootd check c3 does not name c3, slurmd and the fix:\n%s", out)
		}
		// The fix: slurmd started again registers c3 at once.
		if err := c.Node("c3").Start(ctx, "slurmd"); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitIdle(ctx, master, 90, "c1", "c2", "c3"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("munge key broken on c1", func(t *testing.T) {
		setMungeKey(ctx, t, c.Node("c1"), randomKey(t))
		r := runCheck(ctx, t, b)
		// c1's slurmd decodes nothing slurmctld signs with the cluster's key either: its srun
		// step fails with munge, and slurmctld may have noticed already.
		failures(t, r, map[string][]string{"c1": {check.Munge}}, check.Srun, check.Slurmd)
		wantStates(ctx, t, b, inventory.StateReady, "c1")
		// Last, as c1 is slow to come back: its slurmd missed slurmctld's messages meanwhile (the
		// failed step's end among them), so slurmctld holds c1 completing until its next ping.
	})
}

// labMAC is the i-th lab PC's MAC.
func labMAC(i int) string { return fmt.Sprintf("52:54:00:a7:00:%02x", i+1) }

// startLabBootd runs bootd on the hub's bridge with the reference lab's configuration but for
// what a shared test host needs: Slurm without cgroups, no outside time servers (the master
// serves its own clock), and the lab user the test's jobs run as.
func startLabBootd(ctx context.Context, t *testing.T, hub *vlab.Lab, dir string) *vlab.Bootd {
	t.Helper()
	bin := filepath.Join(dir, "bootd")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/bootd").CombinedOutput(); err != nil {
		t.Fatalf("build bootd: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "bootd.toml")
	conf := fmt.Sprintf(`[master]
ntp_servers = []

[slurm]
proctrack_type = "proctrack/linuxproc"
task_plugin = "task/none"

[users.%s]
uid = %d
comment = "Lab user"
`, labUser.Name, labUser.UID)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// Nodes boot an image: a node that says hello is told what it boots.
	if err := vlab.WriteTestImages(filepath.Join(dir, "images"), filepath.Join(dir, "stage"), "console=ttyS0", "master", "compute"); err != nil {
		t.Fatal(err)
	}
	b, err := hub.StartBootd(ctx, bin, dir, "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// netbootAll has each PC do what it does at its first netboot and after `bootd assign`, from a
// host on the segment with its MAC: a PXE client's DHCP lease, the discovery script (it waits);
// then, assigned, DHCP again (its static address) and its overlay from a privileged port. It
// returns each node's files, as bootd-node would unpack them.
func netbootAll(ctx context.Context, t *testing.T, hub *vlab.Lab, b *vlab.Bootd, dir string, names []string) map[string][]vcluster.File {
	t.Helper()
	script := udhcpcScript(t, dir)
	hosts := make([]*vlab.Host, len(names))
	for i, name := range names {
		h, err := hub.AddHost(ctx, "pc-"+name, mustMAC(labMAC(i)))
		if err != nil {
			t.Fatal(err)
		}
		hosts[i] = h
		dhcp(ctx, t, h, script)
		url := "http://10.80.0.1/ipxe/machine?mac=" + strings.ReplaceAll(labMAC(i), ":", "-")
		if out, err := h.Run(ctx, "curl", "-fsS", "--max-time", "20", url); err != nil || !strings.Contains(out, "waiting to be named") {
			t.Fatalf("%s's discovery script: %v\n%s", name, err, out)
		}
	}
	for i, name := range names {
		if out, err := b.CLI(ctx, "assign", name, "--mac", labMAC(i)); err != nil {
			t.Fatalf("bootd assign %s: %v\n%s", name, err, out)
		}
	}
	files := map[string][]vcluster.File{}
	for i, name := range names {
		if lease := dhcp(ctx, t, hosts[i], script); lease != fmt.Sprintf("10.80.0.%d", 100+i) {
			t.Fatalf("%s's address after assign: %s", name, lease)
		}
		files[name] = untar(t, overlayAs(ctx, t, hosts[i], true, 200))
		if err := hosts[i].Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// untar turns an overlay tarball into the node's files.
func untar(t *testing.T, tarball []byte) []vcluster.File {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tarball))
	if err != nil {
		t.Fatal(err)
	}
	var files []vcluster.File
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		f := vcluster.File{Path: "/" + strings.TrimPrefix(h.Name, "./"), Mode: h.FileInfo().Mode() & (fs.ModeDir | fs.ModePerm), UID: h.Uid, GID: h.Gid}
		if h.Typeflag == tar.TypeReg {
			if f.Data, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
		if f.Path != "/" {
			files = append(files, f)
		}
	}
}

// runBootdNode runs the image's own bootd-node steps on a node (hello, report), with bootd's URL
// on its kernel command line as a netbooted node has it.
func runBootdNode(ctx context.Context, t *testing.T, n *vcluster.Node, steps ...string) {
	t.Helper()
	script, err := filepath.Abs("../layers/files/base/bootd/bootd-node")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := n.Run(ctx, "sh", "-c", "echo 'BOOT_IMAGE=vmlinuz bootd=http://10.80.0.1' > /run/cmdline && mount --bind /run/cmdline /proc/cmdline"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, step := range steps {
		if out, err := n.Run(ctx, "sh", script, step); err != nil {
			t.Fatalf("bootd-node %s on %s: %v\n%s", step, n.Name, err, out)
		}
	}
}

// wantStates checks the nodes' states in `bootd nodes`.
func wantStates(ctx context.Context, t *testing.T, b *vlab.Bootd, want inventory.State, names ...string) {
	t.Helper()
	r, err := b.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		i := slices.IndexFunc(r.Nodes, func(n inventory.Node) bool { return n.Name == name })
		if i < 0 || r.Nodes[i].State != want {
			t.Errorf("bootd nodes: %s is not %s: %+v", name, want, r.Nodes)
		}
	}
}

// runCheck runs `bootd check --json` and returns its report; progress is logged.
func runCheck(ctx context.Context, t *testing.T, b *vlab.Bootd) check.Report {
	t.Helper()
	start := time.Now()
	var stdout, stderr bytes.Buffer
	cmd := b.Command(ctx, "check", "--json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var r check.Report
	if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil {
		t.Fatalf("bootd check --json: %v, %v\n%s%s", err, jerr, stdout.String(), stderr.String())
	}
	var ee *exec.ExitError
	if r.Passed != (err == nil) || err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 1) {
		t.Errorf("bootd check passed %v but exited with %v", r.Passed, err)
	}
	t.Logf("bootd check: %s (the report: %s)\n%s", time.Since(start).Round(100*time.Millisecond), r.Took.Round(100*time.Millisecond), stderr.String())
	return r
}

// failures checks that exactly the nodes in want failed, each at least the checks listed and
// none but those and the allowed ones, and that each failure names its node and a fix.
func failures(t *testing.T, r check.Report, want map[string][]string, allowed ...string) {
	t.Helper()
	for _, n := range r.Nodes {
		var got []string
		for _, f := range n.Failed() {
			got = append(got, f.Check)
			t.Logf("%s %s: %s\n  fix: %s", n.Name, f.Check, f.Detail, f.Fix)
			if !strings.Contains(f.Detail+f.Fix, n.Name) || f.Fix == "" {
				t.Errorf("%s's failed %s does not name the node, or has no fix: %+v", n.Name, f.Check, f)
			}
		}
		for _, c := range want[n.Name] {
			if !slices.Contains(got, c) {
				t.Errorf("%s: check %s did not fail (failed: %q)", n.Name, c, got)
			}
		}
		for _, c := range got {
			if !slices.Contains(want[n.Name], c) && !slices.Contains(allowed, c) {
				t.Errorf("%s: check %s failed, want it to pass: %+v", n.Name, c, n.Results)
			}
		}
	}
	if len(r.Nodes) != 4 {
		t.Errorf("report on %d nodes, want master, c1..c3", len(r.Nodes))
	}
}

// setMungeKey gives node n another munge key and restarts its munged.
func setMungeKey(ctx context.Context, t *testing.T, n *vcluster.Node, key []byte) {
	t.Helper()
	p := n.Path("/etc/munge/munge.key")
	if err := os.WriteFile(p, key, 0o400); err != nil {
		t.Fatal(err)
	}
	if err := n.Restart(ctx, "munge"); err != nil {
		t.Fatal(err)
	}
}

func randomKey(t *testing.T) []byte {
	key := make([]byte, 1024)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return key
}

// as runs a command on a node as the lab user, in their home.
func as(args ...string) []string {
	return append([]string{"setpriv", "--reuid=" + labUser.Name, "--regid=" + labUser.Name, "--init-groups", "--",
		"env", "HOME=" + labUser.Home, "sh", "-c", "cd \"$HOME\" && exec \"$@\"", "sh"}, args...)
}

// makeHome makes the lab user's home on the master, as bootd-node storage does, and puts the
// user's job files in it.
func makeHome(ctx context.Context, t *testing.T, master *vcluster.Node) {
	t.Helper()
	if out, err := master.Run(ctx, "install", "-d", "-m", "0700", "-o", labUser.Name, "-g", labUser.Name, labUser.Home); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, name := range []string{"allreduce.c", "ddp.py", "ddp.sbatch"} {
		data, err := os.ReadFile(filepath.Join("testdata", "jobs", name))
		if err != nil {
			t.Fatal(err)
		}
		p := master.Path(filepath.Join(labUser.Home, name))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, labUser.UID, labUser.GID); err != nil {
			t.Fatal(err)
		}
	}
}

// installModule installs a module into the master's shared software tree, as EasyBuild would:
// Lmod on every compute must list it.
func installModule(t *testing.T, master *vcluster.Node) {
	t.Helper()
	for _, f := range []vcluster.File{
		{Path: "/opt/software/hello/1.0/bin/hello", Mode: 0o755, Data: []byte("#!/bin/sh\necho \"hello from $(hostname)\"\n")},
		{Path: "/opt/software/modules/all/hello/1.0.lua", Mode: 0o644, Data: []byte("prepend_path(\"PATH\", \"/opt/software/hello/1.0/bin\")\n")},
	} {
		p := master.Path(f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, f.Mode); err != nil {
			t.Fatal(err)
		}
	}
}

// mpiJob builds the MPI program in the user's home and runs it across c1..c3 with plain srun:
// every rank must be in one world of three and print the same sum.
func mpiJob(ctx context.Context, t *testing.T, master *vcluster.Node) {
	out, err := master.Run(ctx, "srun", "--mpi=list")
	if err != nil || !strings.Contains(string(out), "pmix") {
		t.Fatalf("srun --mpi=list offers no pmix: %v\n%s", err, out)
	}
	t.Logf("srun --mpi=list:\n%s", out)
	if out, err := master.Run(ctx, as("mpicc", "-O2", "-o", "allreduce", "allreduce.c")...); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	start := time.Now()
	out, err = master.Run(ctx, as("srun", "-N3", "--ntasks-per-node=1", "./allreduce")...)
	if err != nil {
		t.Fatalf("srun ./allreduce: %v\n%s", err, out)
	}
	t.Logf("srun -N3 ./allreduce in %s:\n%s", time.Since(start).Round(10*time.Millisecond), out)
	ranks := rankLines(t, `rank (\d) of (\d+) on (c\d): allreduce (\d+)`, string(out))
	for _, r := range ranks {
		if r[1] != "3" || r[3] != "6" {
			t.Errorf("rank %s on %s: world of %s, sum %s; want 3 and 6 (1+2+3)", r[0], r[2], r[1], r[3])
		}
	}
}

// ddpJob submits the PyTorch job with sbatch, waits for it, and reads its output from the
// user's home: three ranks, one per compute, the same all-reduced value and the same weights.
func ddpJob(ctx context.Context, t *testing.T, master *vcluster.Node) {
	start := time.Now()
	out, err := master.Run(ctx, as("sbatch", "--parsable", "ddp.sbatch")...)
	if err != nil {
		t.Fatalf("sbatch: %v\n%s", err, out)
	}
	job := strings.TrimSpace(string(out))
	state := waitJob(ctx, t, master, job)
	t.Logf("sbatch ddp.sbatch: job %s %s after %s", job, state, time.Since(start).Round(100*time.Millisecond))
	log, err := os.ReadFile(master.Path(filepath.Join(labUser.Home, "ddp-"+job+".out")))
	if state != "COMPLETED" || err != nil {
		t.Fatalf("job %s %s (%v):\n%s", job, state, err, log)
	}
	t.Logf("ddp-%s.out:\n%s", job, log)
	ranks := rankLines(t, `rank (\d) of (\d+) on (c\d): allreduce (\d+) weights (\S+)`, string(log))
	for _, r := range ranks {
		if r[1] != "3" || r[3] != "6" || r[4] != ranks[0][4] {
			t.Errorf("rank %s on %s: world of %s, sum %s, weights %s; want 3, 6 and the weights of rank %s (%s)", r[0], r[2], r[1], r[3], r[4], ranks[0][0], ranks[0][4])
		}
	}
}

// waitJob polls slurmctld once a second until the job has ended, and returns its state.
// (sbatch --wait polls ever more slowly: 20 s after this job's end, here.)
func waitJob(ctx context.Context, t *testing.T, master *vcluster.Node, job string) string {
	t.Helper()
	re := regexp.MustCompile(`JobState=(\S+)`)
	var last string
	for range 300 {
		out, err := master.Run(ctx, "scontrol", "-o", "show", "job", job)
		if m := re.FindStringSubmatch(string(out)); err == nil && m != nil {
			switch last = m[1]; last {
			case "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED":
			default:
				return last
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("job %s still %s: %v", job, last, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	t.Fatalf("job %s still %s after 300 polls", job, last)
	return ""
}

// rankLines finds one line per rank (0, 1, 2) on distinct computes: the submatches after the
// whole match, rank first, host third.
func rankLines(t *testing.T, pattern, out string) [][]string {
	t.Helper()
	var ranks [][]string
	for _, m := range regexp.MustCompile(pattern).FindAllStringSubmatch(out, -1) {
		ranks = append(ranks, m[1:])
	}
	slices.SortFunc(ranks, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	var got, hosts []string
	for _, r := range ranks {
		got = append(got, r[0])
		hosts = append(hosts, r[2])
	}
	slices.Sort(hosts)
	if !slices.Equal(got, []string{"0", "1", "2"}) || !slices.Equal(slices.Compact(hosts), []string{"c1", "c2", "c3"}) {
		t.Fatalf("want ranks 0, 1, 2 on c1, c2, c3; got ranks %q on %q:\n%s", got, hosts, out)
	}
	return ranks
}
