package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/labcluster/gpucluster/internal/cli"
	"github.com/labcluster/gpucluster/internal/completion"
)

const completionHelp = `Usage: bootd completion bash|zsh

Prints the shell completion script for bootd: commands, flags, and the node names, waiting
MACs and free names that the running bootd knows (asked through its control socket as you
press Tab, so as root; --state-dir or --config on the line are honoured). Load it:

  bash:  source <(bootd completion bash)     or for every shell:
         bootd completion bash > /etc/bash_completion.d/bootd
  zsh:   source <(bootd completion zsh)      (after compinit), or install it in $fpath:
         bootd completion zsh > /usr/local/share/zsh/site-functions/_bootd
`

// stateFlags are the flags that say where the daemon is.
var stateFlags = []completion.Flag{{Name: "state-dir", Values: completion.Dirs}, {Name: "config", Values: completion.Files}}

// bootdCompletion is bootd's command line for the completion scripts (TestCompletionFlags keeps
// it in step with the commands' flags).
var bootdCompletion = completion.Program{
	Name:    "bootd",
	Forward: []string{"state-dir", "config"},
	Commands: []completion.Command{
		{Name: "serve", Flags: []completion.Flag{{Name: "config", Values: completion.Files}, {Name: "interface", Values: completion.Interfaces},
			{Name: "state-dir", Values: completion.Dirs}, {Name: "images", Values: completion.Dirs}, {Name: "ipxe-dir", Values: completion.Dirs},
			{Name: "log-format", Values: completion.Words("text", "json")}, {Name: "debug"}, {Name: "empty-inventory"}}},
		{Name: "nodes", Flags: append([]completion.Flag{{Name: "json"}}, stateFlags...)},
		{Name: "assign", Flags: append([]completion.Flag{{Name: "mac", Values: completion.Ask("waiting")}, {Name: "replace"}, {Name: "ek", Values: completion.Files}}, stateFlags...),
			Args: []completion.Values{completion.Ask("free"), completion.None}},
		{Name: "unassign", Flags: stateFlags, Args: []completion.Values{completion.Ask("nodes"), completion.None}},
		{Name: "power", Flags: append([]completion.Flag{{Name: "json"}, {Name: "default"}}, stateFlags...),
			Args: []completion.Values{completion.Words("on", "off", "cycle", "status", "password"), completion.Ask("nodes")}},
		{Name: "check", Flags: append([]completion.Flag{{Name: "json"}, {Name: "verbose"}}, stateFlags...),
			Args: []completion.Values{completion.Ask("nodes")}},
		{Name: "completion", Args: []completion.Values{completion.Words(completion.Shells...), completion.None}},
	},
}

func runCompletion(args []string) error {
	fs := cli.NewFlagSet("completion", completionHelp)
	rest, err := cli.ParseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(rest) != 1 || !completion.IsShell(rest[0]) {
		return fmt.Errorf("%w: bootd completion bash|zsh", errUsage)
	}
	script, err := completion.Script(bootdCompletion, rest[0])
	if err != nil {
		return err
	}
	_, err = os.Stdout.WriteString(script)
	return err
}

// completeCommand is what the scripts run as Tab is pressed: bootd __complete [--state-dir D]
// [--config F] KIND -- [arguments so far]. It prints one candidate a line, and nothing at all
// when the daemon does not answer within a second (not running, not root).
const completeCommand = "__complete"

func runComplete(args []string) error {
	fs := cli.NewFlagSet(completeCommand, "")
	var cf clientFlags
	cf.register(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		return nil
	}
	c, err := cf.client()
	if err != nil {
		return nil
	}
	c.SetTimeout(time.Second)
	names, err := c.Names()
	if err != nil {
		return nil
	}
	var out []string
	switch fs.Arg(0) {
	case "nodes":
		out = names.Nodes
	case "waiting":
		out = names.Waiting
	case "free":
		out = names.Free
	}
	if len(out) > 0 {
		fmt.Println(strings.Join(out, "\n"))
	}
	return nil
}
