package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/labcluster/gpucluster/internal/check"
	"github.com/labcluster/gpucluster/internal/cli"
)

const checkHelp = `Usage: bootd check [NAME...] [--json] [--verbose]

Proves that the cluster works for its users, node by node (every assigned node, or the NAMEs
given, as names or host lists: c1 c[2-4] master): bootd logs in to the master as root over SSH
(with the cluster's root key, trusting the master's host certificate from the cluster's host
CA), and from there runs each node's own tools over SSH:

  ssh           the master reaches the node as root
  munge         a credential made on the node decodes on the master
  slurmd        slurmd answers, and slurmctld has the node, usable, with the CPUs, memory and
                GPUs the node reported to bootd
  srun          one srun step across every checked node runs on it
  nfs-home      the node sees the master's /home (reads a file the master just wrote there)
  nfs-software  the same for /opt/software
  chrony        chronyd follows the master and is synchronised
  lmod          a login shell's Lmod lists every module of the shared /opt/software tree
  gpus          nvidia-smi lists the GPUs gres gives the node (nodes with GPUs only)

On the master itself: ssh (bootd reaches it), slurmctld (answers), munge (decodes its own).
A compute that Slurm's power saving switched off is not checked, and says so.
A ready node that passes every check becomes "validated" in 'bootd nodes'; a validated node
that fails one is "ready" again. Each failure names the node, the check, what was seen and the
fix. The exit status is 0 when every node passed, 1 otherwise. Progress goes to stderr.
`

// errChecksFailed marks a check that ran and found nodes failing: exit status 1, no usage.
var errChecksFailed = errors.New("checks failed")

func runCheck(args []string) error {
	fs := cli.NewFlagSet("check", checkHelp)
	var cf clientFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	verbose := fs.Bool("verbose", false, "show what every check saw, not only the failures")
	names, err := cli.ParseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	r, err := c.Check(names, func(p string) { fmt.Fprintf(os.Stderr, "bootd check: %s\n", p) })
	if err != nil {
		return err
	}
	if *asJSON {
		if err := printJSON(r); err != nil {
			return err
		}
	} else {
		printReport(os.Stdout, r, *verbose)
	}
	if !r.Passed {
		return fmt.Errorf("%w: %s", errChecksFailed, failedSummary(r))
	}
	return nil
}

// printReport writes one line per node (its state and the checks it passed), then each failed
// check with what was seen and the fix; verbose adds what every check saw.
func printReport(w io.Writer, r check.Report, verbose bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tSTATE\tRESULT\n")
	for _, n := range r.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", n.Name, orDash(string(n.State)), nodeSummary(n))
	}
	tw.Flush()
	for _, n := range r.Nodes {
		for _, res := range n.Results {
			if res.Status != check.Fail && !verbose || n.Skipped {
				continue
			}
			fmt.Fprintf(w, "\n%s %s: %s\n  %s\n", n.Name, res.Check, strings.ToUpper(string(res.Status)), res.Detail)
			if res.Fix != "" {
				fmt.Fprintf(w, "  fix: %s\n", res.Fix)
			}
		}
	}
	passed, skipped := 0, 0
	for _, n := range r.Nodes {
		switch {
		case n.Passed:
			passed++
		case n.Skipped:
			skipped++
		}
	}
	fmt.Fprintf(w, "\n%d of %d passed", passed, len(r.Nodes))
	if skipped > 0 {
		fmt.Fprintf(w, " (%d not checked)", skipped)
	}
	fmt.Fprintf(w, ", from %s in %s\n", r.Master, r.Took.Round(100*time.Millisecond))
}

// nodeSummary is "ok: ssh munge ..." or "FAILED: munge srun (passed: ssh ...)".
func nodeSummary(n check.NodeReport) string {
	var passed, failed, skipped []string
	for _, res := range n.Results {
		switch res.Status {
		case check.Pass:
			passed = append(passed, res.Check)
		case check.Fail:
			failed = append(failed, res.Check)
		default:
			skipped = append(skipped, res.Check)
		}
	}
	if n.Skipped {
		return "not checked: " + n.Results[0].Detail
	}
	s := "ok: " + strings.Join(passed, " ")
	if len(failed) > 0 {
		s = "FAILED: " + strings.Join(failed, " ")
		if len(passed) > 0 {
			s += " (passed: " + strings.Join(passed, " ") + ")"
		}
	}
	if len(skipped) > 0 {
		s += " (n/a: " + strings.Join(skipped, " ") + ")"
	}
	return s
}

// failedSummary names each failing node and its failed checks: "c2 (munge), c3 (slurmd srun)".
func failedSummary(r check.Report) string {
	var parts []string
	for _, n := range r.Nodes {
		var failed []string
		for _, res := range n.Failed() {
			failed = append(failed, res.Check)
		}
		if len(failed) > 0 {
			parts = append(parts, n.Name+" ("+strings.Join(failed, " ")+")")
		}
	}
	return strings.Join(parts, ", ")
}
