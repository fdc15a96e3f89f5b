package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/labcluster/gpucluster/internal/pack"
	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
)

// median is the middle value of get over the runs (the lower of the two middle ones for an even
// count: a figure that some run measured, not a mean of two).
func median[T cmp.Ordered](runs []figures, get func(figures) T) T {
	vs := make([]T, 0, len(runs))
	for _, f := range runs {
		vs = append(vs, get(f))
	}
	slices.Sort(vs)
	return vs[(len(vs)-1)/2]
}

// report prints the median of each figure over the runs, with imgbuild / by-hand ratios against
// both baselines (below 1: imgbuild takes less time).
func report(o options, site testrepo.Site, runs []figures) string {
	dur := func(get func(figures) time.Duration) time.Duration { return median(runs, get) }
	gzip := dur(func(f figures) time.Duration { return f.handInstall + f.handGzip })
	zstd := dur(func(f figures) time.Duration { return f.handInstall + f.handZstd })
	var b strings.Builder
	fmt.Fprintf(&b, "### Image build: %s, median of %d runs\n\n", o.image, len(runs))
	fmt.Fprintf(&b, "Stand-in repository: %d packages for the %d the layers name. By hand: `dnf --installroot` of the image's packages in one transaction, then `mksquashfs` with its defaults (gzip) or with imgbuild's compressor (`-comp zstd -Xcompression-level %d`); a script rebuilds everything every time.\n\n",
		site.Packages, len(site.Names), pack.DefaultZstdLevel)
	b.WriteString("| figure | imgbuild | by hand, gzip | ratio | by hand, zstd | ratio |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	row := func(name string, a, g, z time.Duration) {
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f | %s | %.2f |\n", name, seconds(a), seconds(g), a.Seconds()/g.Seconds(), seconds(z), a.Seconds()/z.Seconds())
	}
	f := runs[0]
	row("full build, empty cache (`imgbuild build` from the lock)", dur(func(f figures) time.Duration { return f.full }), gzip, zstd)
	row("full build with its lock (`imgbuild lock` + `build`)", dur(func(f figures) time.Duration { return f.lock + f.full }), gzip, zstd)
	row("rebuild, nothing changed", dur(func(f figures) time.Duration { return f.unchanged }), gzip, zstd)
	row(fmt.Sprintf("rebuild after editing layer %s (%d of %d layers built)", o.layer, f.rebuilt, f.layers), dur(func(f figures) time.Duration { return f.edited }), gzip, zstd)
	row(fmt.Sprintf("edit of %s to new version: `lock` + `build`", o.layer), dur(func(f figures) time.Duration { return f.relock + f.edited }), gzip, zstd)
	hand := dur(func(f figures) time.Duration { return f.handInstall })
	row("of the full build: the layers (imgbuild: each a copy of its parent's tree, then rpm from its cache, files, services, commands; by hand: dnf resolves and installs)", dur(func(f figures) time.Duration { return f.install }), hand, hand)
	row("of the full build: packing the root file system", dur(func(f figures) time.Duration { return f.pack }),
		dur(func(f figures) time.Duration { return f.handGzip }), dur(func(f figures) time.Duration { return f.handZstd }))
	fmt.Fprintf(&b, "| of the full build: packages into the cache (copied, sha256 checked) | %s | — | — | — | — |\n", seconds(dur(func(f figures) time.Duration { return f.fetch })))
	img, gz, zs := median(runs, func(f figures) int64 { return f.imageBytes }), median(runs, func(f figures) int64 { return f.gzipBytes }), median(runs, func(f figures) int64 { return f.zstdBytes })
	fmt.Fprintf(&b, "| rootfs.squashfs | %.1f MiB | %.1f MiB | %.2f | %.1f MiB | %.2f |\n", mib(img), mib(gz), float64(img)/float64(gz), mib(zs), float64(img)/float64(zs))
	b.WriteString("\nEach run:\n\n| run | full | nothing changed | one layer edited | by hand, gzip | by hand, zstd |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for i, f := range runs {
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s |\n", i+1, seconds(f.full), seconds(f.unchanged), seconds(f.edited), seconds(f.handInstall+f.handGzip), seconds(f.handInstall+f.handZstd))
	}
	return b.String()
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
func mib(n int64) float64            { return float64(n) / (1 << 20) }
