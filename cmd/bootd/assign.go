package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/labcluster/gpucluster/internal/cli"
	"github.com/labcluster/gpucluster/internal/ctl"
)

const assignHelp = `Usage: bootd assign NAME [--mac MAC] [--replace]

Names a machine that netbooted and waits: NAME is "master" or cN (c1, c2, ...). The name gives
the role (master or compute) and the static address (reference lab: master 10.80.0.100, cN
10.80.0.(100+N)). The machine boots on into its role at its next poll, without a power cycle;
from then on DHCP gives its MAC that address and hostname.

With one machine waiting, --mac is not needed. With several, bootd lists them (MAC, model,
serial, first seen) and asks for --mac.

Replacing hardware: when a node's PC (or its motherboard, and so its MAC) is replaced, netboot
the new one so it waits, then move the name to it:
    bootd assign c4 --mac <new MAC> --replace
c4 keeps its address and role; the old MAC is forgotten.
`

func runAssign(args []string) error {
	fs := cli.NewFlagSet("assign", assignHelp)
	var cf clientFlags
	cf.register(fs)
	mac := fs.String("mac", "", "MAC of the waiting machine (needed when several wait)")
	replace := fs.Bool("replace", false, "move NAME to this machine even though NAME is already bound (replaced hardware)")
	rest, err := cli.ParseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(rest) != 1 {
		return fmt.Errorf("%w: want exactly one NAME: bootd assign NAME [--mac MAC] [--replace]", errUsage)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	n, err := c.Assign(ctl.AssignRequest{Name: rest[0], MAC: *mac, Replace: *replace})
	var ce *ctl.Error
	if errors.As(err, &ce) && len(ce.Waiting) > 0 {
		fmt.Fprintf(os.Stderr, "bootd assign: %d machines are waiting; say which one is %s with --mac:\n\n", len(ce.Waiting), rest[0])
		printWaiting(os.Stderr, ce.Waiting, time.Now())
		fmt.Fprintf(os.Stderr, "\ne.g.  bootd assign %s --mac %s\n", rest[0], ce.Waiting[0].MAC)
		os.Exit(1)
	}
	if err != nil {
		return err
	}
	fmt.Printf("%s is %s: %s, address %s; it boots into its role at its next poll or boot\n", n.MAC, n.Name, n.Role, n.Address)
	return nil
}
