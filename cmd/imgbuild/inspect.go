package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/labcluster/gpucluster/internal/cli"
	"github.com/labcluster/gpucluster/internal/imgbuild"
)

const listHelp = `Usage: imgbuild list [NAME] [--out DIR]

Lists the versions in the images directory (of every image, or of NAME), oldest first, each
verified the way bootd verifies it (sizes and sha256 of every file).
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
	versions, err := imgbuild.List(c.out, name)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tVERSION\tCREATED\tSIZE\tLAYERS\tSTATUS")
	for _, v := range versions {
		m, status := v.Image.Manifest, "ok"
		if v.Err != nil {
			status = "BROKEN: " + v.Err.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f MiB\t%d\t%s\n", m.Name, m.Version, m.Created.Format("2006-01-02 15:04"), float64(v.Size)/(1<<20), len(m.Layers), status)
	}
	return tw.Flush()
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
