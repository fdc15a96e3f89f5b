// Command bootd is the lab's netboot appliance: DHCP, TFTP and HTTP on one interface, so a PC
// that netboots waits to be named and, once assigned, boots into its role with its address.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/labcluster/gpucluster/internal/tftpd"
)

const usage = `bootd netboots a lab's PCs into a cluster: DHCP, TFTP and HTTP on one interface.

Usage:
  bootd serve     [--config F] [--interface IF] [--state-dir D] [--images D]   run the appliance
  bootd nodes     [--json]                     show assigned nodes and machines waiting
  bootd assign    NAME [--mac MAC] [--replace] [--ek FILE]
                                               name a waiting machine (master, c1, c2, ...); --ek pins its TPM
  bootd unassign  NAME                         forget a node; its machine waits again at next boot
  bootd power     on|off|cycle|status NAME...  switch nodes through their BMCs, or wake them (Wake-on-LAN)
  bootd check     [NAME...] [--json]           prove the nodes work: munge, Slurm, srun, NFS, time, modules, GPUs
  bootd completion bash|zsh                    shell completion, names and MACs from the running bootd

A PC that netboots and is unknown gets a short discovery lease, shows "waiting to be named"
with its MAC, and appears under "waiting" in 'bootd nodes'. 'bootd assign c4' binds it: it boots
on without a power cycle as c4, with c4's static address, in the compute role ('master' is the
master role). 'bootd check' then proves each node works for users (validated in 'bootd nodes').
nodes, assign, unassign, power and check talk to the running daemon through its control socket,
<state-dir>/bootd.sock (default /var/lib/bootd): pass --state-dir or --config when it runs elsewhere.

Run 'bootd <command> --help' for a command's flags.
`

// errUsage marks mistakes in how a command was called: exit status 2, not 1.
var errUsage = errors.New("usage")

var commands = map[string]func(args []string) error{
	"serve":      runServe,
	"nodes":      runNodes,
	"assign":     runAssign,
	"unassign":   runUnassign,
	"power":      runPower,
	"check":      runCheck,
	"completion": runCompletion,
	// Not in the usage: the completion scripts run it as Tab is pressed.
	completeCommand: runComplete,
	// Not in the usage: bootd serve runs it as its TFTP process.
	tftpd.WorkerCommand: tftpd.RunWorker,
}

func main() {
	if len(os.Args) < 2 || isHelp(os.Args[1]) {
		fmt.Fprint(os.Stderr, usage)
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "bootd: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err := cmd(os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		// A bare errUsage means the flag package already printed the problem.
		if err != errUsage {
			fmt.Fprintf(os.Stderr, "bootd %s: %v\n", os.Args[1], err)
		}
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(tftpd.ExitStatus(err))
	}
}

func isHelp(s string) bool { return s == "-h" || s == "--help" || s == "help" || s == "-help" }
