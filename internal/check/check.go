package check

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labcluster/gpucluster/internal/inventory"
)

// Master runs a shell script on the master as root (through SSH: internal/masterssh) and
// returns what it printed on standard output.
type Master interface {
	Run(ctx context.Context, script string) (string, error)
}

// Options say what a run checks.
type Options struct {
	Master inventory.Node   // the master, which Run reaches through a Master
	Nodes  []inventory.Node // the nodes to check, the master among them or not
	// Parallel bounds the nodes checked at once (each is one SSH session on the connection to
	// the master, whose sshd allows 10 by default: MaxSessions). Default 8.
	Parallel int
	// Progress, if set, hears what the run is doing, for the person waiting.
	Progress func(string)
	// roots prefixes the share paths (/home, ...): tests run the scripts on a scratch tree.
	roots string
}

// Run checks every node of opts through m and reports on each. A master that cannot be reached
// fails every node's first check, so the report still names each node.
func Run(ctx context.Context, m Master, opts Options) Report {
	r := Report{Master: fmt.Sprintf("%s (%s)", opts.Master.Name, opts.Master.Address), Started: time.Now()}
	if opts.Parallel <= 0 {
		opts.Parallel = 8
	}
	// Two secrets: the token goes into the shares, readable by every user of every node for
	// the run, so it cannot be the marker that no output may forge.
	run := &run{m: m, opts: opts, s: newScripts(rand.Text(), rand.Text(), opts.roots)}
	r.Nodes = run.all(ctx)
	r.Passed = true
	for i, n := range r.Nodes {
		r.Nodes[i].Passed = !n.Skipped && len(n.Failed()) == 0
		r.Passed = r.Passed && (n.Skipped || r.Nodes[i].Passed)
	}
	r.Took = time.Since(r.Started)
	return r
}

type run struct {
	m    Master
	opts Options
	s    scripts
}

func (r *run) progress(format string, args ...any) {
	if r.opts.Progress != nil {
		r.opts.Progress(fmt.Sprintf(format, args...))
	}
}

// all is the run: the master's own part, each compute's from the master, then munge's
// decoding and srun across the computes on the master.
func (r *run) all(ctx context.Context) []NodeReport {
	r.progress("checking %s from %s %s", count(len(r.opts.Nodes), "node"), r.opts.Master.Name, r.opts.Master.Address)
	out, err := r.m.Run(ctx, r.s.prepare())
	if err != nil {
		return r.unreachable(err)
	}
	master := sections(r.s.marker, out)
	slurm := parseSlurmNodes(master["nodes"].out)
	var computes []inventory.Node
	asleep := map[string]string{}
	for _, n := range r.opts.Nodes {
		switch {
		case n.Name == r.opts.Master.Name:
		case poweredDown(slurm[n.Name].State):
			asleep[n.Name] = slurm[n.Name].State
		default:
			computes = append(computes, n)
		}
	}
	node := r.computes(ctx, computes)
	// Only nodes whose slurmd answers go into the step across all, so one broken slurmd does
	// not fail srun on the others.
	creds := map[string]string{}
	slurmd := map[string]Result{}
	var srun []string
	for _, n := range computes {
		sec := node[n.Name]
		if sec[Munge].ok() {
			creds[n.Name] = strings.TrimSpace(sec[Munge].out)
		}
		slurmd[n.Name] = judgeSlurmd(n, sec, slurm)
		if judgeSSH(n.Name, sec).Status == Pass && slurmd[n.Name].Status == Pass {
			srun = append(srun, n.Name)
		}
	}
	if len(srun) > 0 {
		r.progress("srun across %s; munge credentials of %s decoded on %s", strings.Join(srun, ","), count(len(creds), "node"), r.opts.Master.Name)
	}
	out, err = r.m.Run(ctx, r.s.finish(creds, srun))
	finish := sections(r.s.marker, out)
	if err != nil {
		finish[Srun] = section{out: "the master's script failed: " + err.Error(), rc: -1}
	}
	var reports []NodeReport
	for _, n := range r.opts.Nodes {
		if n.Name == r.opts.Master.Name {
			reports = append(reports, r.masterReport(n, master))
			continue
		}
		if st, ok := asleep[n.Name]; ok {
			reports = append(reports, NodeReport{Name: n.Name, Role: n.Role, Skipped: true, Results: []Result{{Check: Slurmd, Status: Skip,
				Detail: n.Name + " is switched off by Slurm's power saving (" + st + "); it wakes for the next job that wants it, or `bootd power on " + n.Name + "`"}}})
			continue
		}
		reports = append(reports, r.computeReport(n, node[n.Name], master, finish, slurmd[n.Name], slices.Contains(srun, n.Name)))
	}
	return reports
}

// unreachable reports a run whose master did not answer: every node fails, since every check
// runs from there.
func (r *run) unreachable(err error) []NodeReport {
	name := r.opts.Master.Name
	res := fail(SSH, fmt.Sprintf("bootd cannot run commands on %s (%s): %v", name, r.opts.Master.Address, err),
		"is "+name+" up (`bootd nodes`)? its sshd must run and accept root's key (bootd's overlay: /root/.ssh/authorized_keys) and offer its host certificate")
	var reports []NodeReport
	for _, n := range r.opts.Nodes {
		nr := NodeReport{Name: n.Name, Role: n.Role, Results: []Result{res}}
		if n.Name != name {
			nr.Results = []Result{fail(SSH, "not checked: every check runs from "+name+", which bootd cannot reach", res.Fix)}
		}
		reports = append(reports, nr)
	}
	return reports
}

// computes runs each compute's script on the master, a bounded number at once.
func (r *run) computes(ctx context.Context, nodes []inventory.Node) map[string]map[string]section {
	var mu sync.Mutex
	got := map[string]map[string]section{}
	sem := make(chan struct{}, r.opts.Parallel)
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out, err := r.m.Run(ctx, r.s.node(n.Name, n.Hardware != nil && len(n.Hardware.GPUs) > 0))
			sec := sections(r.s.marker, out)
			if err != nil && sec[SSH].rc == 0 {
				sec[SSH] = section{out: err.Error(), rc: -1}
			}
			mu.Lock()
			got[n.Name] = sec
			done := len(got)
			mu.Unlock()
			r.progress("%s: node checks done (%d of %d)", n.Name, done, len(nodes))
		}()
	}
	wg.Wait()
	return got
}

// masterReport judges the master's own part: bootd reached it, slurmctld answers, and munge
// decodes its own credential.
func (r *run) masterReport(n inventory.Node, sec map[string]section) NodeReport {
	res := []Result{pass(SSH, "bootd logs in as root with the cluster's root key; host certificate accepted")}
	if s := sec[Slurmctld]; s.ok() && strings.Contains(s.out, "is UP") {
		res = append(res, pass(Slurmctld, lastLines(s.out, 1)))
	} else {
		res = append(res, fail(Slurmctld, "slurmctld does not answer on "+n.Name+": "+lastLines(s.out, 2),
			"`systemctl status slurmctld` on "+n.Name+" and its log (/var/log/slurm/slurmctld.log)"))
	}
	if s := sec[Munge]; s.ok() && strings.Contains(s.out, "Success (0)") {
		res = append(res, pass(Munge, "a credential made on "+n.Name+" decodes there"))
	} else {
		res = append(res, fail(Munge, "munge on "+n.Name+" does not decode its own credential: "+unmungeStatus(s.out),
			"`systemctl status munge` on "+n.Name+" (key /etc/munge/munge.key, 0400 munge)"))
	}
	for _, sh := range shares {
		if s := sec["token-"+sh.check]; !s.ok() {
			res = append(res, fail(sh.check, "root on "+n.Name+" cannot write "+sh.path+": "+lastLines(s.out, 2),
				"`bootd-node storage` sets up "+sh.path+" on the master (its LABDATA disk, or tmpfs): `systemctl status bootd-storage` there"))
		}
	}
	return NodeReport{Name: n.Name, Role: n.Role, Results: res}
}

// computeReport judges one compute. When the master's SSH to it failed, the other checks are
// not run and say so.
func (r *run) computeReport(n inventory.Node, sec, master, finish map[string]section, slurmd Result, ran bool) NodeReport {
	nr := NodeReport{Name: n.Name, Role: n.Role}
	ssh := judgeSSH(n.Name, sec)
	nr.Results = append(nr.Results, ssh)
	if ssh.Status != Pass {
		for _, c := range []string{Munge, Slurmd, Srun, Home, Software, Chrony, Lmod, GPUs} {
			nr.Results = append(nr.Results, fail(c, "not run: the master cannot reach "+n.Name+" over SSH", "fix ssh first"))
		}
		return nr
	}
	nr.Results = append(nr.Results, judgeMunge(n.Name, sec, finish), slurmd, judgeSrun(n.Name, ran, finish))
	for _, sh := range shares {
		nr.Results = append(nr.Results, judgeShare(sh.check, sh.path, n.Name, r.s.token, sec))
	}
	nr.Results = append(nr.Results,
		judgeChrony(n.Name, r.opts.Master.Address.String(), sec),
		judgeLmod(n.Name, sec, sharedModules(master["modules"])),
		judgeGPUs(n, sec))
	return nr
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// count is "1 node", "3 nodes".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
