package main

import (
	"context"
	"fmt"

	"github.com/labcluster/gpucluster/internal/cli"
	"github.com/labcluster/gpucluster/internal/imgbuild"
)

const lockHelp = `Usage: imgbuild lock IMAGE.toml [--site FILE] [--layers DIR]

Resolves the image's layers with dnf against their repositories and pins every RPM (name,
epoch, version, release, arch, repository, location, sha256) in IMAGE.lock.json beside the image
file. Commit the lock: builds install exactly what it lists. SOURCE_DATE_EPOCH, when set, is
recorded in the lock as the time every build of it stamps (default: the last commit's time).
`

func runLock(ctx context.Context, args []string) error {
	fs := cli.NewFlagSet("lock", lockHelp)
	var c common
	c.register(fs)
	pos, err := parse(fs, args, 1, "one image file: imgbuild lock images/compute.toml")
	if err != nil {
		return err
	}
	o, err := c.options()
	if err != nil {
		return err
	}
	path, lock, err := imgbuild.Lock(ctx, pos[0], o)
	if err != nil {
		return err
	}
	n := 0
	for _, l := range lock.Layers {
		n += len(l.Packages)
	}
	fmt.Printf("locked %d packages in %d layers: %s\n", n, len(lock.Layers), path)
	return nil
}
