package main

import (
	"fmt"
	"github.com/labcluster/gpucluster/internal/cli"
)

const unassignHelp = `Usage: bootd unassign NAME

Forgets node NAME: its MAC no longer gets NAME's address, and at its next netboot the machine
waits to be named again. The running node is not touched.
`

func runUnassign(args []string) error {
	fs := cli.NewFlagSet("unassign", unassignHelp)
	var cf clientFlags
	cf.register(fs)
	rest, err := cli.ParseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(rest) != 1 {
		return fmt.Errorf("%w: want exactly one NAME: bootd unassign NAME", errUsage)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	n, err := c.Unassign(rest[0])
	if err != nil {
		return err
	}
	fmt.Printf("%s unassigned (was %s, %s); it waits to be named at its next netboot\n", n.Name, n.MAC, n.Address)
	return nil
}
