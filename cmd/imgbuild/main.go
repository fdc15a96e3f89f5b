// Command imgbuild composes Rocky Linux 9 layers into reproducible, versioned node images that
// bootd serves: lock pins every package, build makes a version, list and diff inspect them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `imgbuild composes Rocky Linux 9 layers into reproducible, versioned node images.

Usage:
  imgbuild lock  images/compute.toml            resolve with dnf and pin every package (writes images/compute.lock.json)
  imgbuild build images/compute.toml [--version V] [--out DIR]   build a version from the lock
  imgbuild list  [NAME] [--out DIR]             versions in the images directory, verified as bootd verifies them
  imgbuild diff  NAME A B [--out DIR]           packages added, removed and changed between versions A and B
  imgbuild completion bash|zsh                  shell completion: commands, flags, image files, images and versions

An image file (images/*.toml) names a role and its layers (layers/*.toml). Repositories keep
their real locations in the layers; a site file (--site site.toml) points them at a local
mirror in one place. Builds are reproducible: the same lock gives byte-identical files.
Run 'imgbuild <command> --help' for a command's flags.
`

var errUsage = errors.New("usage")

var commands = map[string]func(context.Context, []string) error{"lock": runLock, "build": runBuild, "list": runList, "diff": runDiff,
	"completion": runCompletion,
	// Not in the usage: the completion scripts run it as Tab is pressed.
	completeCommand: runComplete}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Fprint(os.Stderr, usage)
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "imgbuild: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd(ctx, os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		if err != errUsage {
			fmt.Fprintf(os.Stderr, "imgbuild %s: %v\n", os.Args[1], err)
		}
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
