package main

import (
	"context"
	"fmt"
	"time"

	"github.com/labcluster/gpucluster/internal/cli"
	"github.com/labcluster/gpucluster/internal/imgbuild"
)

const buildHelp = `Usage: imgbuild build IMAGE.toml [--version V] [--out DIR] [--site FILE]

Builds a new version of the image from its lock: downloads the locked RPMs into the cache
(checking every sha256), applies the layers (reusing cached layers that did not change),
normalizes the tree and packs vmlinuz, initramfs.img and rootfs.squashfs into
DIR/<name>/<version>/ with manifest.json. The version appears whole or not at all.
Default version: today's date and a counter, e.g. 2026.11.21-1.

A package the mirror no longer has (Rocky moves a minor release to its vault when the next
ships; EPEL keeps only the newest build) is fetched from where the lock says it lasts (the
vault, Koji), or from --package-archive: the packages CI published with earlier versions.
Every package is checked against the lock's sha256 whatever its source.

Each layer is stored in the cache (--cache) as what it adds to the layers below it (overlayfs:
needs root), and the packed root under the top layer's key: a build with nothing changed links
the packed root into the new version. The cache then keeps the layers, packed root and packages
of each image's last build and removes the rest. --keep-cache keeps everything.
`

func runBuild(ctx context.Context, args []string) error {
	fs := cli.NewFlagSet("build", buildHelp)
	var c common
	c.register(fs)
	version := fs.String("version", "", "version name (default YYYY.MM.DD-N)")
	keepCache := fs.Bool("keep-cache", false, "keep every layer tree and package in the cache, not only those of each image's last build")
	archive := fs.String("package-archive", "", "directory or URL of <sha256>.rpm files (what ci/build-images.sh --publish leaves in DIR/rpms), tried before the mirrors")
	pos, err := parse(fs, args, 1, "one image file: imgbuild build images/compute.toml")
	if err != nil {
		return err
	}
	o, err := c.options()
	if err != nil {
		return err
	}
	o.Version, o.KeepCache = *version, *keepCache
	if o.PackageArchive, err = packageArchive(*archive); err != nil {
		return err
	}
	r, err := imgbuild.Build(ctx, pos[0], o)
	if err != nil {
		return err
	}
	printReport(r)
	return nil
}

func printReport(r *imgbuild.Report) {
	fmt.Printf("built %s/%s in %s: %s\n", r.Image, r.Version, r.Total.Round(time.Second), r.Dir)
	for _, l := range r.Layers {
		how := "built"
		if l.Cached {
			how = "cached"
		}
		fmt.Printf("  layer %-16s %-6s %8s  %s\n", l.Layer, how, l.Duration.Round(10*time.Millisecond), l.Key[:12])
	}
	fmt.Printf("  download %s, pack %s\n", r.Fetch.Round(10*time.Millisecond), r.Pack.Round(10*time.Millisecond))
}
