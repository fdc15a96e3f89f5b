package check

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/labcluster/gpucluster/internal/inventory"
)

func pass(check, detail string) Result { return Result{Check: check, Status: Pass, Detail: detail} }

func fail(check, detail, fix string) Result {
	return Result{Check: check, Status: Fail, Detail: detail, Fix: fix}
}

// judgeSSH: the master's ssh to the node worked and the node's script ran to its end.
func judgeSSH(name string, sec map[string]section) Result {
	s, ok := sec[SSH]
	switch {
	case !ok:
		return fail(SSH, "the master's script for "+name+" did not finish", "see bootd's log; run `ssh "+name+" true` as root on the master")
	case s.rc != 0:
		detail := fmt.Sprintf("ssh from the master to %s failed (status %d)", name, s.rc)
		if s.rc == 124 {
			detail = "ssh from the master to " + name + " timed out"
		}
		if s.out != "" {
			detail += ": " + lastLines(s.out, 3)
		}
		return fail(SSH, detail, "is "+name+" up (`bootd nodes`)? its sshd must run and accept root's key, which bootd's overlay puts in its /root/.ssh/authorized_keys; try `ssh "+name+" true` as root on the master")
	}
	return pass(SSH, "root on the master logs in with its key; host certificate accepted")
}

// judgeMunge: the node made a credential and the master decoded it.
func judgeMunge(name string, node, finish map[string]section) Result {
	made := node[Munge]
	if !made.ok() {
		return fail(Munge, "munge -n on "+name+" failed: "+lastLines(made.out, 2),
			"munged is not running on "+name+": `systemctl status munge` there (its key is /etc/munge/munge.key, 0400 munge)")
	}
	dec := finish["unmunge-"+name]
	if !dec.ok() || !strings.Contains(dec.out, "Success (0)") {
		return fail(Munge, "a credential made on "+name+" does not decode on the master: "+unmungeStatus(dec.out),
			"the munge keys differ: give "+name+" the cluster's key again (`/usr/libexec/bootd-node overlay` on "+name+", or reboot it), then `systemctl restart munge` there")
	}
	return pass(Munge, "a credential made on "+name+" decodes on the master")
}

// unmungeStatus is unmunge's STATUS line, or the end of its output.
func unmungeStatus(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "STATUS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return lastLines(out, 2)
}

// slurmNode is a node as `scontrol -o show node` prints it: the fields the checks compare.
type slurmNode struct {
	CPUs, MemoryMiB, GPUs int
	State, Reason, Gres   string
}

var (
	fieldRE  = regexp.MustCompile(`(?:^| )(NodeName|CPUTot|RealMemory|State|Gres)=(\S*)`)
	reasonRE = regexp.MustCompile(`(?:^| )Reason=(.*?)(?: [A-Za-z]+=|$)`)
)

// parseSlurmNodes reads `scontrol -o show node`: one line per node.
func parseSlurmNodes(out string) map[string]slurmNode {
	nodes := map[string]slurmNode{}
	for _, line := range strings.Split(out, "\n") {
		f := map[string]string{}
		for _, m := range fieldRE.FindAllStringSubmatch(line, -1) {
			f[m[1]] = m[2]
		}
		if f["NodeName"] == "" {
			continue
		}
		n := slurmNode{State: f["State"], Gres: f["Gres"]}
		n.CPUs, _ = strconv.Atoi(f["CPUTot"])
		n.MemoryMiB, _ = strconv.Atoi(f["RealMemory"])
		n.GPUs = gresGPUs(f["Gres"])
		if m := reasonRE.FindStringSubmatch(line); m != nil {
			n.Reason = m[1]
		}
		nodes[f["NodeName"]] = n
	}
	return nodes
}

// gresGPUs counts the GPUs of a Gres field: "gpu:rtx3090:2(S:0)", "gpu:2", "(null)".
func gresGPUs(gres string) int {
	total := 0
	for _, g := range strings.Split(gres, ",") {
		if i := strings.IndexByte(g, '('); i >= 0 { // "(S:0)": the sockets they sit on
			g = g[:i]
		}
		parts := strings.Split(g, ":")
		if parts[0] != "gpu" || len(parts) < 2 {
			continue
		}
		if n, err := strconv.Atoi(parts[len(parts)-1]); err == nil {
			total += n
		} else {
			total++ // "gpu:rtx3090": one
		}
	}
	return total
}

// poweredDown reports whether slurmctld's node state says Slurm's power saving switched the
// node off or is switching it off ("IDLE+POWERED_DOWN", sinfo's idle~).
func poweredDown(state string) bool {
	for _, st := range strings.Split(state, "+") {
		if st == "POWERED_DOWN" || st == "POWERING_DOWN" {
			return true
		}
	}
	return false
}

// badStates are the Slurm node states (and flags) in which no job starts on a node.
var badStates = []string{"DOWN", "DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "NOT_RESPONDING", "FUTURE", "UNKNOWN", "POWERED_DOWN", "POWERING_DOWN", "INVALID_REG"}

// judgeSlurmd: the node's slurmd answers, and slurmctld lists it, usable, with the CPUs, memory
// and GPUs the node reported to bootd.
func judgeSlurmd(n inventory.Node, node map[string]section, slurm map[string]slurmNode) Result {
	fix := "`systemctl status slurmd` on " + n.Name + " and its log (/var/log/slurm/slurmd.log); the master's slurmctld log"
	if s := node[Slurmd]; !s.ok() {
		return fail(Slurmd, "slurmd on "+n.Name+" does not answer (scontrol show slurmd: "+lastLines(s.out, 2)+")",
			"start it: `systemctl restart slurmd` on "+n.Name+"; "+fix)
	}
	sn, ok := slurm[n.Name]
	if !ok {
		return fail(Slurmd, "slurmctld does not list "+n.Name, "slurmd on "+n.Name+" has not registered (dynamic node, slurmd -Z): "+fix)
	}
	for _, st := range strings.Split(sn.State, "+") {
		// A trailing * is slurmctld's "not responding".
		if slices.Contains(badStates, strings.TrimSuffix(st, "*")) || strings.HasSuffix(st, "*") {
			detail := "slurmctld has " + n.Name + " in state " + sn.State
			if sn.Reason != "" {
				detail += " (" + sn.Reason + ")"
			}
			return fail(Slurmd, detail, "once the cause is fixed, `scontrol update nodename="+n.Name+" state=resume` on the master; "+fix)
		}
	}
	hw := n.Hardware
	if hw == nil {
		return fail(Slurmd, n.Name+" has not reported its hardware to bootd (state "+string(n.State)+")",
			"`systemctl status bootd-report` on "+n.Name+" (it posts slurmd -C and the GPUs at boot)")
	}
	var diffs []string
	if sn.CPUs != hw.CPUs {
		diffs = append(diffs, fmt.Sprintf("%d CPUs, reported %d", sn.CPUs, hw.CPUs))
	}
	if sn.MemoryMiB != hw.RealMemoryMiB {
		diffs = append(diffs, fmt.Sprintf("%d MiB of memory, reported %d", sn.MemoryMiB, hw.RealMemoryMiB))
	}
	if sn.GPUs != len(hw.GPUs) {
		diffs = append(diffs, fmt.Sprintf("%d GPUs (Gres=%s), reported %d", sn.GPUs, sn.Gres, len(hw.GPUs)))
	}
	if len(diffs) > 0 {
		return fail(Slurmd, "slurmd registered "+n.Name+" with "+strings.Join(diffs, "; "),
			"reboot "+n.Name+" (its hardware changed since it reported, or slurmd sees other hardware than slurmd -C did); then `scontrol show node "+n.Name+"`")
	}
	return pass(Slurmd, fmt.Sprintf("registered as %s with %d CPUs, %d MiB, %d GPUs, as reported", sn.State, sn.CPUs, sn.MemoryMiB, sn.GPUs))
}

// judgeSrun: the node printed its host name from the step across all nodes, or from its own
// step when that one failed.
func judgeSrun(name string, ran bool, finish map[string]section) Result {
	if !ran {
		return fail(Srun, "not tried: slurmd on "+name+" failed its check", "fix slurmd first")
	}
	all := finish[Srun]
	if all.ok() && hasLine(all.out, name) {
		return pass(Srun, "srun across every checked node ran on "+name)
	}
	if one, ok := finish["srun-"+name]; ok {
		if one.ok() && hasLine(one.out, name) {
			return pass(Srun, "srun on "+name+" alone ran (the step across all failed on other nodes)")
		}
		all = one
	}
	return fail(Srun, "srun on "+name+" failed: "+lastLines(all.out, 3),
		"`srun -w "+name+" hostname` on the master; slurmd's log on "+name+" says why a step fails (munge, the job's user missing there, cgroups)")
}

func hasLine(out, want string) bool {
	return slices.Contains(strings.Split(out, "\n"), want)
}

// judgeShare: the node reads the token the master wrote into the share.
func judgeShare(check, path, name, token string, node map[string]section) Result {
	mount := node[check+"-mount"].out
	if s := node[check]; !s.ok() || strings.TrimSpace(s.out) != token {
		return fail(check, name+"'s "+path+" does not show the master's "+path+" (mounted there: "+orNone(mount)+")",
			"`mount "+path+"` on "+name+" (its /etc/fstab line master:"+path+" comes from bootd's overlay); on the master, `exportfs -v` must list "+path+" for the lab subnet")
	}
	return pass(check, name+" sees the master's "+path+" ("+orNone(mount)+")")
}

func orNone(s string) string {
	if s = strings.TrimSpace(s); s == "" {
		return "nothing"
	}
	return lastLines(s, 2)
}

// judgeChrony: the node's chronyd has selected the master and is synchronised to it.
func judgeChrony(name string, master string, node map[string]section) Result {
	s := node[Chrony]
	fix := "`chronyc -n sources` on " + name + "; its /etc/chrony.conf (bootd's overlay) names the master, whose chronyd must allow the lab subnet"
	if !s.ok() {
		return fail(Chrony, "chronyc on "+name+" failed: "+lastLines(s.out, 2), "`systemctl status chronyd` on "+name+"; "+fix)
	}
	var ref, leap string
	for _, l := range strings.Split(s.out, "\n") {
		k, v, _ := strings.Cut(l, ":")
		switch strings.TrimSpace(k) {
		case "Reference ID":
			ref = strings.TrimSpace(v)
		case "Leap status":
			leap = strings.TrimSpace(v)
		}
	}
	if !strings.Contains(ref, "("+master+")") {
		return fail(Chrony, name+"'s chronyd follows "+orNone(ref)+", not the master ("+master+")", fix)
	}
	if leap == "" || leap == "Not synchronised" {
		return fail(Chrony, name+"'s chronyd has selected the master but is not synchronised (leap status "+orNone(leap)+")", "a node that just booted needs a minute: check again; "+fix)
	}
	return pass(Chrony, "follows the master ("+ref+"), leap status "+leap)
}

// judgeLmod: a login shell on the node has the shared tree on its module path and lists every
// module the master has there.
func judgeLmod(name string, node map[string]section, shared []string) Result {
	s := node[Lmod]
	fix := "Lmod's /etc/profile.d/lmod.sh and bootd's /etc/profile.d/modulepath.sh on " + name + ", and its /opt/software mount"
	var path string
	avail := map[string]bool{}
	inShared := false
	for _, l := range strings.Split(s.out, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "MODULEPATH="):
			path = strings.TrimPrefix(l, "MODULEPATH=")
		case strings.HasSuffix(l, ":"):
			inShared = strings.TrimSuffix(strings.TrimSuffix(l, ":"), "/") == modulesDir
		case inShared && l != "":
			avail[strings.TrimSuffix(l, "/")] = true
		}
	}
	if !s.ok() {
		return fail(Lmod, "`module -t avail` in a login shell on "+name+" failed: "+lastLines(s.out, 2), fix)
	}
	if !slices.Contains(strings.Split(path, ":"), modulesDir) {
		return fail(Lmod, "a login shell's MODULEPATH on "+name+" lacks "+modulesDir+" ("+orNone(path)+")", fix)
	}
	var missing []string
	for _, m := range shared {
		if !avail[m] {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		return fail(Lmod, "Lmod on "+name+" does not list "+strings.Join(missing, ", ")+" of the master's "+modulesDir, fix)
	}
	return pass(Lmod, fmt.Sprintf("a login shell lists the %d modules of the shared tree", len(shared)))
}

// sharedModules turns the master's listing of the module directory ("./hello/1.0.lua") into
// module names ("hello/1.0"): none when the directory is missing (nothing installed yet).
func sharedModules(listing section) []string {
	if !listing.ok() {
		return nil
	}
	var out []string
	for _, l := range strings.Split(listing.out, "\n") {
		if l = strings.TrimPrefix(strings.TrimSpace(l), "./"); l != "" {
			out = append(out, strings.TrimSuffix(l, ".lua"))
		}
	}
	return out
}

// judgeGPUs: nvidia-smi lists as many GPUs as gres gives the node.
func judgeGPUs(n inventory.Node, node map[string]section) Result {
	want := 0
	if n.Hardware != nil {
		want = len(n.Hardware.GPUs)
	}
	if want == 0 {
		return Result{Check: GPUs, Status: Skip, Detail: "gres lists no GPUs on " + n.Name}
	}
	s := node[GPUs]
	got := 0
	for _, l := range strings.Split(s.out, "\n") {
		if strings.HasPrefix(l, "GPU ") {
			got++
		}
	}
	if !s.ok() || got != want {
		return fail(GPUs, fmt.Sprintf("gres lists %d GPUs on %s, nvidia-smi -L shows %d: %s", want, n.Name, got, lastLines(s.out, 2)),
			"`nvidia-smi` and `dmesg | grep -i nvidia` on "+n.Name+": the NVIDIA driver must load (Secure Boot refuses unsigned modules)")
	}
	return pass(GPUs, fmt.Sprintf("nvidia-smi lists the %d GPUs gres gives %s", got, n.Name))
}
