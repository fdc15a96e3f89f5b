package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/labcluster/gpucluster/internal/cli"
	"github.com/labcluster/gpucluster/internal/imgbuild"
)

const listHelp = `Usage: imgbuild list [NAME] [--out DIR]

Lists the versions in the images directory (of every image, or of NAME), oldest first, each
verified the way bootd verifies it (sizes and sha256 of every file). Exits 1 when a version is
broken: bootd refuses it.
`

func runList(ctx context.Context, args []string) error {
	fs := cli.NewFlagSet("list", listHelp)
	var c common
	c.register(fs)
	pos, err := parse(fs, args, -1, "")
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("%w: at most one image name", errUsage)
	}
	name := ""
	if len(pos) == 1 {
		name = pos[0]
	}
	return list(os.Stdout, c.out, name)
}

// list writes the versions as a table to w and fails when one of them is broken, so that a
// script (CI after publishing) hears of it from the exit status.
func list(w io.Writer, out, name string) error {
	versions, err := imgbuild.List(out, name)
	if err != nil {
		return err
	}
	if len(versions) == 0 {
		return none(w, out, name)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tVERSION\tCREATED\tSIZE\tLAYERS\tSTATUS")
	broken := 0
	for _, v := range versions {
		m, status := v.Image.Manifest, "ok"
		if v.Err != nil {
			status = "BROKEN: " + v.Err.Error()
			broken++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f MiB\t%d\t%s\n", m.Name, m.Version, m.Created.Format("2006-01-02 15:04"), float64(v.Size)/(1<<20), len(m.Layers), status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if broken > 0 {
		return fmt.Errorf("%d of %d versions broken: bootd refuses them", broken, len(versions))
	}
	return nil
}

// none says that there is nothing to list yet, rather than an error about a missing directory.
func none(w io.Writer, out, name string) error {
	what := "no image built yet in " + out
	if name != "" {
		what = "no version of " + name + " in " + out
	}
	_, err := fmt.Fprintf(w, "%s: imgbuild build writes versions there\n", what)
	return err
}

const diffHelp = `Usage: imgbuild diff NAME A B [--out DIR]

Shows the packages added (+), removed (-) and changed (~) from version A to version B of image
NAME, read from the locks the versions carry.
`

func runDiff(ctx context.Context, args []string) error {
	fs := cli.NewFlagSet("diff", diffHelp)
	var c common
	c.register(fs)
	pos, err := parse(fs, args, 3, "NAME A B: imgbuild diff compute 2026.11.20-1 2026.11.21-1")
	if err != nil {
		return err
	}
	changes, err := imgbuild.Diff(c.out, pos[0], pos[1], pos[2])
	if err != nil {
		return err
	}
	for _, ch := range changes {
		switch {
		case ch.From == "":
			fmt.Printf("+ %s %s\n", ch.Name, ch.To)
		case ch.To == "":
			fmt.Printf("- %s %s\n", ch.Name, ch.From)
		default:
			fmt.Printf("~ %s %s -> %s\n", ch.Name, ch.From, ch.To)
		}
	}
	if len(changes) == 0 {
		fmt.Println("no package differs")
	}
	return nil
}
