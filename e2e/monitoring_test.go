//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/vcluster"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// Monitoring in TestCluster: the real bootd serves the inventory's service discovery from the
// hub (the nodes' bootd address), every node runs Debian's node_exporter with the command line of
// the monitoring layer's unit, and the master runs Debian's Prometheus with the unit's command
// line and the /etc/prometheus/lab.yml bootd rendered for it. Nothing lists a node's address.

// monitoring is bootd and the exporters, as a test starts them.
type monitoring struct {
	bootd *vlab.Bootd
}

// Debian's names for the programs the monitoring layer's units run.
var debianPrograms = map[string]string{
	"/usr/bin/node_exporter": "prometheus-node-exporter",
	"/usr/bin/prometheus":    "prometheus",
}

// unitCommand is the ExecStart of one of the monitoring layer's units, its program as Debian
// names it.
func unitCommand(t *testing.T, unit string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "layers", "files", "monitoring", unit))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if cmd, ok := strings.CutPrefix(line, "ExecStart="); ok {
			argv := strings.Fields(cmd)
			if p, ok := debianPrograms[argv[0]]; ok {
				argv[0] = p
			}
			return argv
		}
	}
	t.Fatalf("%s has no ExecStart", unit)
	return nil
}

// startMonitoring starts bootd in the cluster's hub with the inventory's nodes assigned (the
// MACs TestCluster's renders use), a node_exporter on every node and Prometheus on the master.
func startMonitoring(ctx context.Context, t *testing.T, c *vcluster.Cluster, dir string, nodes []string) *monitoring {
	t.Helper()
	bin := buildBootd(ctx, t, dir)
	run := filepath.Join(dir, "bootd-run")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := c.Hub().StartBootd(ctx, bin, run)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Proc.Kill(); _ = b.Proc.Wait(context.Background()) })
	m := &monitoring{bootd: b}
	for _, name := range nodes {
		m.assign(ctx, t, c.Node(name))
		startNodeExporter(ctx, t, c.Node(name))
	}
	master := c.Node("master")
	if _, err := os.Stat(master.Path("/etc/prometheus/lab.yml")); err != nil {
		t.Fatalf("the master's overlay has no Prometheus configuration: %v", err)
	}
	if out, err := master.Run(ctx, "mkdir", "-p", "/var/lib/lab-prometheus"); err != nil { // the unit's StateDirectory
		t.Fatalf("%v\n%s", err, out)
	}
	if err := master.StartDaemon(ctx, "prometheus", unitCommand(t, "lab-prometheus.service")...); err != nil {
		t.Fatal(err)
	}
	return m
}

// assign makes n known to bootd as a lab admin would: the machine netboots (a PXE DHCP exchange
// from its namespace, busybox's udhcpc with a PXE ROM's vendor class, then the discovery script's
// request from the leased address), waits, and `bootd assign NAME --mac MAC` names it; then it
// drops the discovery address and keeps its static one, as a booted node does. The MAC is its
// link's own.
func (m *monitoring) assign(ctx context.Context, t *testing.T, n *vcluster.Node) {
	t.Helper()
	// The link's MAC from netlink: the node's /sys is the host's sysfs.
	link, err := n.Run(ctx, "ip", "-o", "link", "show", "eth0")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(link))
	mac := ""
	if i := slices.Index(f, "link/ether"); i >= 0 && i+1 < len(f) {
		mac = f[i+1]
	}
	const script = "/run/udhcpc-bound" // in the node: its /tmp and /run are its own
	body := "#!/bin/sh\nif [ \"$1\" = bound ]; then ip addr add \"$ip/$subnet\" dev \"$interface\" && echo \"$ip/$subnet\" > /run/udhcpc.lease; fi\nexit 0\n"
	if err := os.WriteFile(n.Path(script), []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := n.Run(ctx, "busybox", "udhcpc", "-i", "eth0", "-f", "-q", "-n", "-t", "5", "-T", "2",
		"-V", "PXEClient:Arch:00000:UNDI:002001", "-s", script)
	leaseb, _ := os.ReadFile(n.Path("/run/udhcpc.lease"))
	lease := strings.TrimSpace(string(leaseb))
	if err != nil || lease == "" || mac == "" {
		t.Fatalf("%s: PXE DHCP from %s: %v\n%s", n.Name, mac, err, out)
	}
	ip, _, _ := strings.Cut(lease, "/")
	discovery := "http://10.80.0.1/ipxe/machine?mac=" + mac + "&manufacturer=vcluster&product=" + n.Name
	if out, err := n.Run(ctx, "curl", "-sf", "--interface", ip, discovery); err != nil || !strings.Contains(string(out), "waiting") {
		t.Fatalf("%s: discovery script from %s: %v\n%s", n.Name, ip, err, out)
	}
	if out, err := m.bootd.CLI(ctx, "assign", n.Name, "--mac", mac); err != nil {
		t.Fatalf("bootd assign %s --mac %s: %v\n%s", n.Name, mac, err, out)
	}
	if out, err := n.Run(ctx, "ip", "addr", "del", lease, "dev", "eth0"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// startNodeExporter runs node_exporter on n as the layer's unit does; the textfile directory is
// the layer's tmpfiles.d line, made here as systemd-tmpfiles would.
func startNodeExporter(ctx context.Context, t *testing.T, n *vcluster.Node) {
	t.Helper()
	if out, err := n.Run(ctx, "mkdir", "-p", "/var/lib/node_exporter/textfile"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := n.StartDaemon(ctx, "node_exporter", unitCommand(t, "lab-node-exporter.service")...); err != nil {
		t.Fatal(err)
	}
}

// promResult is one series of a Prometheus instant query.
type promResult struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query asks the master's Prometheus (from the master) for expr now.
func query(ctx context.Context, master *vcluster.Node, expr string) ([]promResult, error) {
	out, err := master.Run(ctx, "wget", "-q", "-O", "-", "http://127.0.0.1:9090/api/v1/query?query="+url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []promResult `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("%s: %w: %s", expr, err, out)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", expr, r.Error)
	}
	return r.Data.Result, nil
}

// waitUp polls Prometheus until up{job="nodes"} is 1 for exactly the named instances, bounded by
// tries polls two seconds apart (targets appear within bootd's 15 s refresh and a scrape).
func waitUp(ctx context.Context, t *testing.T, master *vcluster.Node, tries int, names ...string) {
	t.Helper()
	want := slices.Sorted(slices.Values(names))
	var got []string
	for range tries {
		res, err := query(ctx, master, `up{job="nodes"} == 1`)
		got = nil
		if err == nil {
			for _, r := range res {
				got = append(got, r.Metric["instance"])
			}
			slices.Sort(got)
			if slices.Equal(got, want) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("up: %v", ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
	all, _ := query(ctx, master, `up`)
	t.Fatalf("up{job=\"nodes\"} == 1 for %v, want %v; every target: %v\nprometheus log:\n%s", got, want, all, vlab.TailFile(master.LogPath("prometheus"), 20))
}

// checkFound: every node appears with up == 1 by itself, with its role from bootd, bootd's own
// metrics are scraped, the Slurm queue reaches Prometheus through the master's node_exporter, and
// every query of the lab's Grafana dashboard is one Prometheus runs.
func (m *monitoring) checkFound(ctx context.Context, t *testing.T, master *vcluster.Node, names ...string) {
	start := time.Now()
	waitUp(ctx, t, master, 60, names...)
	t.Logf("Prometheus finds %v through bootd, up == 1 for each: %s", names, time.Since(start).Round(100*time.Millisecond))
	res, err := query(ctx, master, `up{job="nodes",node="c1"}`)
	if err != nil || len(res) != 1 || res[0].Metric["role"] != "compute" || res[0].Metric["instance"] != "c1" {
		t.Errorf("c1's target labels: %v (%v), want node c1, role compute, instance c1", res, err)
	}
	computes := fmt.Sprint(len(names) - 1)
	waitQuery(ctx, t, master, `bootd_nodes{role="compute",state="assigned"}`, "bootd's own metrics, "+computes+" computes assigned", func(r []promResult) bool {
		return len(r) == 1 && r[0].Value[1] == computes
	})
	// The master's Slurm queue, as lab-slurm-metrics collects it, through its node_exporter.
	script, _ := filepath.Abs(filepath.Join("..", "layers", "files", "monitoring", "lab-slurm-metrics"))
	if out, err := master.Run(ctx, "sh", script, "--once"); err != nil {
		t.Fatalf("lab-slurm-metrics: %v\n%s", err, out)
	}
	waitQuery(ctx, t, master, `slurm_nodes{instance="master",state="idle"}`, computes+" Slurm nodes idle", func(r []promResult) bool {
		return len(r) == 1 && r[0].Value[1] == computes
	})
	for _, expr := range dashboardQueries(t) {
		if _, err := query(ctx, master, expr); err != nil {
			t.Errorf("the dashboard's query %q: %v", expr, err)
		}
	}
}

// waitQuery polls Prometheus until expr's result passes ok, for 40 s at most.
func waitQuery(ctx context.Context, t *testing.T, master *vcluster.Node, expr, what string, ok func([]promResult) bool) {
	t.Helper()
	var res []promResult
	var err error
	for range 40 {
		if res, err = query(ctx, master, expr); err == nil && ok(res) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	t.Fatalf("%s: %s gives %v (%v)", what, expr, res, err)
}

// dashboardQueries are the PromQL expressions of the monitoring layer's Grafana dashboard.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "layers", "files", "monitoring", "lab-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}

// buildBootd builds bootd into dir.
func buildBootd(ctx context.Context, t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "bootd")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../cmd/bootd").CombinedOutput(); err != nil {
		t.Fatalf("build bootd: %v\n%s", err, out)
	}
	return bin
}
