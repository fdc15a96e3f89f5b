package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/cli"
	"github.com/labcluster/gpucluster/internal/completion"
)

const completionHelp = `Usage: imgbuild completion bash|zsh

Prints the shell completion script for imgbuild: commands, flags, image files (*.toml), and
the images and versions in the images directory (--out on the line is honoured). Load it:

  bash:  source <(imgbuild completion bash)     or for every shell:
         imgbuild completion bash > /etc/bash_completion.d/imgbuild
  zsh:   source <(imgbuild completion zsh)      (after compinit), or install it in $fpath:
         imgbuild completion zsh > /usr/local/share/zsh/site-functions/_imgbuild
`

// commonFlags are every command's flags (common.register).
var commonFlags = []completion.Flag{{Name: "layers", Values: completion.Dirs}, {Name: "site", Values: completion.Glob("*.toml")},
	{Name: "out", Values: completion.Dirs}, {Name: "cache", Values: completion.Dirs},
	{Name: "log-format", Values: completion.Words("text", "json")}, {Name: "q"}}

// imgbuildCompletion is imgbuild's command line for the completion scripts
// (TestCompletionFlags keeps it in step with the commands' flags).
var imgbuildCompletion = completion.Program{
	Name:    "imgbuild",
	Forward: []string{"out"},
	Commands: []completion.Command{
		{Name: "lock", Flags: commonFlags, Args: []completion.Values{completion.Glob("*.toml"), completion.None}},
		{Name: "build", Flags: append([]completion.Flag{{Name: "version", Values: completion.Any}, {Name: "keep-cache"}, {Name: "package-archive", Values: completion.Dirs}}, commonFlags...),
			Args: []completion.Values{completion.Glob("*.toml"), completion.None}},
		{Name: "list", Flags: commonFlags, Args: []completion.Values{completion.Ask("images"), completion.None}},
		{Name: "diff", Flags: commonFlags, Args: []completion.Values{completion.Ask("images"), completion.Ask("versions"),
			completion.Ask("versions"), completion.None}},
		{Name: "completion", Args: []completion.Values{completion.Words(completion.Shells...), completion.None}},
	},
}

func runCompletion(_ context.Context, args []string) error {
	fs := cli.NewFlagSet("completion", completionHelp)
	rest, err := cli.ParseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 || !completion.IsShell(rest[0]) {
		return fmt.Errorf("%w: imgbuild completion bash|zsh", errUsage)
	}
	script, err := completion.Script(imgbuildCompletion, rest[0])
	if err != nil {
		return err
	}
	_, err = os.Stdout.WriteString(script)
	return err
}

// completeCommand is what the scripts run as Tab is pressed: imgbuild __complete [--out DIR]
// images|versions -- [arguments so far]. It lists the images directory as bootd would find it
// (artifact.ReadNames; a version holds a manifest.json); nothing when it cannot.
const completeCommand = "__complete"

func runComplete(_ context.Context, args []string) error {
	fs := cli.NewFlagSet(completeCommand, "")
	var c common
	c.register(fs)
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		return nil
	}
	rest := fs.Args()[1:]
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	var dir string
	switch {
	case fs.Arg(0) == "images":
		dir = c.out
	case fs.Arg(0) == "versions" && len(rest) > 0 && filepath.Base(rest[0]) == rest[0] && rest[0] != "..":
		dir = filepath.Join(c.out, rest[0])
	default:
		return nil
	}
	for _, name := range subdirs(dir, fs.Arg(0) == "versions") {
		fmt.Println(name)
	}
	return nil
}

// subdirs are the image names in dir, or with versions the versions in dir that hold a manifest:
// the names artifact.ReadNames accepts, which bootd's catalog and imgbuild list read too.
func subdirs(dir string, versions bool) []string {
	names, err := artifact.ReadNames(dir)
	if err != nil {
		return nil
	}
	if versions {
		names = slices.DeleteFunc(names, func(v string) bool {
			_, err := os.Stat(filepath.Join(dir, v, artifact.ManifestFile))
			return err != nil
		})
	}
	slices.Sort(names)
	return names
}
