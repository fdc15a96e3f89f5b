package check

import (
	"fmt"
	"strings"
)

// shares are the master's exports each compute mounts, and the check each one's result goes to.
var shares = []struct{ check, path string }{
	{Home, "/home"},
	{Software, "/opt/software"},
}

// modulesDir is the shared tree's module directory (overlays/lmod/modulepath.sh puts it first).
const modulesDir = "/opt/software/modules/all"

// tokenName is the file the master writes into each share for the computes to read.
const tokenName = ".bootd-check"

// scripts builds the shell scripts a run sends to the master: every one is fixed text but for
// the run's two random values and the node names, which are quoted.
type scripts struct {
	marker string // frames each command's output (sections.go): known to bootd and the master only
	token  string // written into the shares for the computes to read back
	roots  string // prefix of every share path: "" but in tests
}

func newScripts(nonce, token, roots string) scripts {
	return scripts{marker: "@@bootd-check-" + nonce, token: token, roots: roots}
}

func (s scripts) share(path string) string { return s.roots + path }

// prepare runs on the master first: it writes the shares' tokens and reads what the master
// itself knows (slurmctld, munge, the nodes as slurmctld sees them, the shared modules).
func (s scripts) prepare() string {
	var b strings.Builder
	b.WriteString(shellHelpers(s.marker))
	for _, sh := range shares {
		tok := s.share(sh.path) + "/" + tokenName
		fmt.Fprintf(&b, "sec token-%s; printf '%%s\\n' %s > %s && chmod 0644 %s; rc $?\n", sh.check, quote(s.token), quote(tok), quote(tok))
	}
	b.WriteString("sec slurmctld; timeout 20 scontrol ping 2>&1; rc $?\n")
	b.WriteString("sec munge; timeout 20 munge -n 2>&1 | timeout 20 unmunge 2>&1; rc $?\n")
	b.WriteString("sec nodes; timeout 20 scontrol -o show node 2>&1; rc $?\n")
	fmt.Fprintf(&b, "sec modules; { cd %s && find . -type f ! -name '.*' | sort; } 2>&1; rc $?\n", quote(s.share(modulesDir)))
	return b.String()
}

// node runs on the master and checks one node from there: over SSH, the node's own tools print
// what the checks read (its munge credential, its slurmd, the tokens in its shares, its chronyd,
// its login shell's modules, its GPUs), each command bounded in time.
func (s scripts) node(name string, gpus bool) string {
	var remote strings.Builder
	remote.WriteString(shellHelpers(s.marker))
	remote.WriteString("sec munge; timeout 20 munge -n 2>&1; rc $?\n")
	remote.WriteString("sec slurmd; timeout 20 scontrol show slurmd 2>&1; rc $?\n")
	for _, sh := range shares {
		tok := s.share(sh.path) + "/" + tokenName
		fmt.Fprintf(&remote, "sec %s; timeout 20 cat %s 2>&1; rc $?\n", sh.check, quote(tok))
		fmt.Fprintf(&remote, "sec %s-mount; findmnt -n -o SOURCE,FSTYPE -T %s 2>&1; rc $?\n", sh.check, quote(s.share(sh.path)))
	}
	remote.WriteString("sec chrony; timeout 20 chronyc -n tracking 2>&1; rc $?\n")
	remote.WriteString(`sec lmod; timeout 60 bash -lc 'echo "MODULEPATH=${MODULEPATH-}"; module -t avail' 2>&1; rc $?` + "\n")
	if gpus {
		remote.WriteString("sec gpus; timeout 30 nvidia-smi -L 2>&1; rc $?\n")
	}
	remote.WriteString("exit 0\n")
	end := s.marker + "-end"
	var b strings.Builder
	b.WriteString(shellHelpers(s.marker))
	b.WriteString("err=$(mktemp) || exit 1\n")
	fmt.Fprintf(&b, "timeout 150 ssh -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=15 -- %s /bin/sh -s 2>\"$err\" <<'%s'\n%s%s\n", quote(name), end, remote.String(), end)
	b.WriteString("s=$?\nsec ssh; tail -c 2000 \"$err\"; rc $s\nrm -f \"$err\"\n")
	return b.String()
}

// srunWait is how long srun waits for its nodes (--immediate, seconds): a node that is busy with
// users' jobs fails srun rather than hold the check up.
const srunWait = 10

// finish runs on the master last: it decodes each node's munge credential, runs srun across
// the nodes given (each alone as well when the step across all fails, to tell which fail), and
// removes the tokens.
func (s scripts) finish(creds map[string]string, srun []string) string {
	var b strings.Builder
	b.WriteString(shellHelpers(s.marker))
	for _, name := range sortedKeys(creds) {
		fmt.Fprintf(&b, "sec unmunge-%s; printf '%%s\\n' %s | timeout 20 unmunge 2>&1; rc $?\n", name, quote(creds[name]))
	}
	if len(srun) > 0 {
		quoted := quote(strings.Join(srun, ","))
		fmt.Fprintf(&b, "sec srun; timeout 120 srun --immediate=%d -D / -N%d -w %s --ntasks-per-node=1 -t 3 hostname 2>&1; ok=$?; rc $ok\n", srunWait, len(srun), quoted)
		if len(srun) > 1 {
			b.WriteString("if [ $ok -ne 0 ]; then\n")
			for _, name := range srun {
				fmt.Fprintf(&b, "sec srun-%s; timeout 120 srun --immediate=%d -D / -N1 -w %s -t 3 hostname 2>&1; rc $?\n", name, srunWait, quote(name))
			}
			b.WriteString("fi\n")
		}
	}
	b.WriteString(s.cleanup())
	return b.String()
}

// cleanup removes the tokens.
func (s scripts) cleanup() string {
	var b strings.Builder
	for _, sh := range shares {
		fmt.Fprintf(&b, "rm -f %s\n", quote(s.share(sh.path)+"/"+tokenName))
	}
	return b.String()
}
