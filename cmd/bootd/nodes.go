package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/labcluster/gpucluster/internal/cli"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/power"
)

const nodesHelp = `Usage: bootd nodes [--json]

Shows the assigned nodes (name, role, MAC, address, state, power, identity, hardware, last seen)
and the machines waiting to be named (MAC, vendor/model, serial, first and last seen). A node's
states, in order: assigned (named, not yet booted as such), booting (fetched its boot script), up
(reported itself from its address), ready (reported its hardware: CPUs, memory, GPUs, as Slurm
will see them), validated (passed 'bootd check' since: munge, Slurm, srun, NFS, time, modules,
GPUs work on it). POWER is what the node's BMC last said (bootd asks every minute and after
'bootd power'): on, off, or ? when it did not answer; "woken" after a Wake-on-LAN packet; - for a
node without a BMC. Then, if there are any, the UEFI PCs that fetched iPXE and never started it,
with what to do: a board that hangs in ipxe.efi gets snponly.efi next; one that refuses both has
Secure Boot on.

IDENTITY is how bootd knows the node when it hands out its secrets: "TPM" and the first 16 hex
digits of its TPM endorsement key's SHA-256 (--json has all of them; "pinned": given with
bootd assign --ek), whose secrets only that TPM can open; or "MAC+address", the weaker check of a
node without a TPM on record (yet): a machine that copies its MAC and address gets its secrets
(SECURITY.md).

ROOT is where the node's root image came from at its last boot, as the node reported it: "cache
hit" (its cache disk held the version: nothing fetched, mounted from the disk), "fetched to cache"
(fetched onto its cache disk, mounted from there), "RAM only" (fetched into RAM: no cache disk),
with how: by chunks (the share bootd sent; the rest came from other nodes or versions it held) or
the whole file (the fallback); - when the node reported nothing (booted without bootd-fetch, or
before bootd started).
`

func runNodes(args []string) error {
	fs := cli.NewFlagSet("nodes", nodesHelp)
	var cf clientFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the inventory as JSON")
	rest, err := cli.ParseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected %q: bootd nodes [--json]", errUsage, rest[0])
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	r, err := c.Nodes()
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(r)
	}
	printNodes(os.Stdout, r, time.Now())
	return nil
}

func printNodes(w io.Writer, r ctl.NodesReply, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NAME\tROLE\tMAC\tADDRESS\tSTATE\tPOWER\tIDENTITY\tROOT\tHARDWARE\tLAST SEEN\n")
	weaker := 0
	for _, n := range r.Nodes {
		if n.TPM == nil {
			weaker++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Role, n.MAC, n.Address, n.State, nodePower(r.Power, n.Name),
			identity(n.TPM), nodeRoot(r.Roots, n.Name), hardware(n.Hardware), ago(n.LastSeen, now))
	}
	if len(r.Nodes) == 0 {
		fmt.Fprintf(tw, "(none)\n")
	}
	tw.Flush()
	if weaker > 0 {
		fmt.Fprintf(w, "MAC+address: no TPM on record, a weaker check: a machine that copies such a node's MAC and address gets its secrets (SECURITY.md)\n")
	}
	fmt.Fprintln(w)
	printWaiting(w, r.Waiting, now)
	printNotStarted(w, r.NotStarted, now)
}

// printNotStarted lists PCs that fetched iPXE and never started it, with what to do (only when
// there are any: a lab without them sees nothing new).
func printNotStarted(w io.Writer, pcs []ctl.LoaderTrouble, now time.Time) {
	if len(pcs) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "iPXE NEVER STARTED MAC\tNODE\tFETCHED, NEVER STARTED\tLAST FETCHED\tNEXT\n")
	for _, p := range pcs {
		var fetched []string
		for _, f := range slices.Sorted(maps.Keys(p.Fetched)) {
			fetched = append(fetched, fmt.Sprintf("%s x%d", f, p.Fetched[f]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.MAC, orDash(p.Node), strings.Join(fetched, ", "), ago(p.LastFetched, now), p.Next)
	}
	tw.Flush()
	for _, p := range pcs {
		fmt.Fprintf(w, "%s: %s\n", p.MAC, p.Advice)
	}
}

func printWaiting(w io.Writer, waiting []inventory.Machine, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "WAITING MAC\tVENDOR/MODEL\tSERIAL\tFIRMWARE\tFIRST SEEN\tLAST SEEN\n")
	for _, m := range waiting {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.MAC, orDash(strings.TrimSpace(m.Facts.Manufacturer+" "+m.Facts.Product)),
			orDash(m.Facts.Serial), orDash(strings.Trim(m.Facts.Platform+"/"+m.Facts.Arch, "/")), ago(m.FirstSeen, now), ago(m.LastSeen, now))
	}
	if len(waiting) == 0 {
		fmt.Fprintf(tw, "(none)\n")
	}
	tw.Flush()
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Local().Format("2006-01-02 15:04:05") + " (" + now.Sub(t).Round(time.Second).String() + " ago)"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// identity says how bootd knows a node: by its TPM's endorsement key, or by MAC and address only.
func identity(t *inventory.TPM) string {
	if t == nil {
		return "MAC+address"
	}
	s := "TPM " + t.EKSHA256[:min(16, len(t.EKSHA256))]
	if t.Pinned {
		s += " (pinned)"
	}
	return s
}

// hardware summarises a node's report: "8 CPUs, 15.5 GiB, 2 GPUs (rtx3090)", "1 CPU, 0.5 GiB".
func hardware(hw *inventory.Hardware) string {
	if hw == nil {
		return "-"
	}
	s := fmt.Sprintf("%s, %.1f GiB", count(hw.CPUs, "CPU"), float64(hw.RealMemoryMiB)/1024)
	if len(hw.GPUs) > 0 {
		s += fmt.Sprintf(", %s (%s)", count(len(hw.GPUs), "GPU"), hw.GPUs[0].Type)
	}
	return s
}

// count is n nouns, the noun in the singular for one. (GiB is a unit: "1.0 GiB" stays.)
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// nodeRoot is the ROOT column: "cache hit", "fetched to cache (4% from bootd)", "RAM only
// (whole file)".
func nodeRoot(roots map[string]ctl.Root, name string) string {
	r, ok := roots[name]
	if !ok {
		return "-"
	}
	if r.Source == "cache" {
		return "cache hit"
	}
	where := "RAM only"
	if r.Storage == "disk" {
		where = "fetched to cache"
	}
	switch {
	case r.Source == "whole":
		return where + " (whole file)"
	case r.Size > 0:
		return fmt.Sprintf("%s (%.0f%% from bootd)", where, 100*float64(r.FromBootd)/float64(r.Size))
	}
	return where
}

// nodePower is the POWER column: what bootd last learned of the node's power.
func nodePower(book map[string]power.Result, name string) string {
	r, ok := book[name]
	switch {
	case !ok:
		return "-"
	case r.Method == power.MethodWoL && strings.HasPrefix(r.Done, "magic packet"):
		return "woken"
	case r.Method == power.MethodWoL:
		return "-"
	}
	return powerWord(r)
}
