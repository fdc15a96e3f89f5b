package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"golang.org/x/term"

	"github.com/labcluster/gpucluster/internal/cli"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/hostlist"
	"github.com/labcluster/gpucluster/internal/power"
)

const powerHelp = `Usage: bootd power on|off|cycle|status NAME... [--json]
       bootd power password NAME... | --default

Switches nodes on and off through their BMCs, or wakes a PC without one with Wake-on-LAN.
NAME is a node name or a host list as Slurm and pdsh write them: c4, c[1-4], master,c[7-9].

  on      switch on: through the BMC, or a Wake-on-LAN magic packet that bootd sends on its
          interface to the node's MAC (the PC's firmware must have Wake-on-LAN enabled)
  off     cut the power at once, as the power button held down (BMC only)
  cycle   off and on again, or on when it is off (BMC only)
  status  the power as each BMC reports it

A node's BMC is its [bmc.NAME] table in bootd's config (protocol ipmi or redfish, address,
user); a node without one has no BMC. bootd also asks every BMC for its node's power once a
minute: 'bootd nodes' shows the last answer.

password reads a BMC password from standard input (without echo at a terminal) and hands it to
the running bootd, which keeps it with its other secrets in <state-dir>/secrets/bmc/ (0600,
never logged); --default sets the password of every BMC that has none of its own:
    bootd power password --default          (type it, then Enter)
    bootd power password c[1-4] < pwfile

Exit status: 0 when every node was reached, 1 when any was not (each failure says why).
`

func runPower(args []string) error {
	fs := cli.NewFlagSet("power", powerHelp)
	var cf clientFlags
	cf.register(fs)
	asJSON := fs.Bool("json", false, "print the results as JSON")
	all := fs.Bool("default", false, "password: the password of every BMC without its own")
	rest, err := cli.ParseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(rest) == 0 {
		return fmt.Errorf("%w: bootd power on|off|cycle|status NAME..., or bootd power password NAME... | --default", errUsage)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	if rest[0] == "password" {
		return setPasswords(c, rest[1:], *all)
	}
	if _, err := power.ParseAction(rest[0]); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if len(rest) == 1 {
		return fmt.Errorf("%w: which nodes? bootd power %s NAME... (c1, c[1-4], master)", errUsage, rest[0])
	}
	r, err := c.Power(ctl.PowerRequest{Action: rest[0], Nodes: rest[1:]})
	if err != nil {
		return err
	}
	if *asJSON {
		if err := printJSON(r); err != nil {
			return err
		}
	} else {
		printPower(os.Stdout, r.Results)
	}
	return notReached(r.Results)
}

// notReached is the error of an action that failed on some nodes (exit status 1): each failure
// is on its node's line already, so it only names them.
func notReached(rs []power.Result) error {
	var failed []string
	for _, r := range rs {
		if r.Failed() {
			failed = append(failed, r.Node)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d nodes not reached: %s", len(failed), len(rs), strings.Join(failed, ", "))
}

// printPower prints one line per node: its power, how bootd reaches it and what happened.
func printPower(w io.Writer, rs []power.Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tPOWER\tVIA\tRESULT\n")
	for _, r := range rs {
		result := r.Done
		if r.Failed() {
			result = "FAILED: " + r.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Node, powerWord(r), via(r), orDash(result))
	}
	tw.Flush()
}

// powerWord is a node's power in one word: what its BMC said, "?" when bootd could not tell.
func powerWord(r power.Result) string {
	if r.State == "" || r.State == power.StateUnknown {
		return "?"
	}
	return string(r.State)
}

// via says how bootd reaches a node: its BMC's protocol and address, or Wake-on-LAN.
func via(r power.Result) string {
	if r.BMC == "" {
		return r.Method
	}
	return r.Method + " " + r.BMC
}

// setPasswords reads one password and hands it to the daemon for each node named, or as the
// default.
func setPasswords(c *ctl.Client, lists []string, asDefault bool) error {
	if asDefault == (len(lists) > 0) {
		return fmt.Errorf("%w: bootd power password NAME... (c1, c[1-4]), or bootd power password --default", errUsage)
	}
	names := []string{""}
	if !asDefault {
		var err error
		if names, err = hostlist.Expand(lists...); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	which := "every BMC without its own"
	if !asDefault {
		which = strings.Join(names, ", ")
	}
	pw, err := readPassword(os.Stdin, "BMC password for "+which+": ")
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := c.SetBMCPassword(ctl.BMCPasswordRequest{Node: n, Password: pw}); err != nil {
			return err
		}
	}
	fmt.Printf("bootd keeps the BMC password of %s\n", which)
	return nil
}

// readPassword reads one line: at a terminal without echo, after a prompt on stderr.
func readPassword(in *os.File, prompt string) (string, error) {
	if term.IsTerminal(int(in.Fd())) {
		fmt.Fprint(os.Stderr, prompt)
		b, err := term.ReadPassword(int(in.Fd()))
		fmt.Fprintln(os.Stderr)
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		return string(b), nil
	}
	line, err := bufio.NewReader(io.LimitReader(in, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read password: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("no password on standard input (one line)")
	}
	return line, nil
}
