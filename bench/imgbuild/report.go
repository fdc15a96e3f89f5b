package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/labcluster/gpucluster/internal/testrepo"
)

// report prints the median of each figure over the runs, with imgbuild / by-hand ratios (below
// 1: imgbuild takes less time).
func report(o options, site testrepo.Site, runs []figures) string {
	med := func(get func(figures) time.Duration) time.Duration {
		var ds []time.Duration
		for _, f := range runs {
			ds = append(ds, get(f))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	f := runs[0]
	hand := med(func(f figures) time.Duration { return f.handInstall + f.handSquash })
	full := med(func(f figures) time.Duration { return f.full })
	var b strings.Builder
	fmt.Fprintf(&b, "### Image build: %s, median of %d runs\n\n", o.image, len(runs))
	fmt.Fprintf(&b, "Stand-in repository of %d packages (the image installs %d by name; dnf adds their dependencies). ", site.Packages, f.imagePackages)
	fmt.Fprintf(&b, "By hand: `dnf --installroot` of the image's packages in one transaction, then `mksquashfs`; a script rebuilds everything every time.\n\n")
	b.WriteString("| figure | imgbuild | by hand | imgbuild / by hand |\n| --- | ---: | ---: | ---: |\n")
	row := func(name string, a, h time.Duration) {
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f |\n", name, seconds(a), seconds(h), a.Seconds()/h.Seconds())
	}
	row("full build, empty cache (`imgbuild build` from the lock)", full, hand)
	row("full build with its lock (`imgbuild lock` + `build`)", med(func(f figures) time.Duration { return f.lock + f.full }), hand)
	row("rebuild, nothing changed", med(func(f figures) time.Duration { return f.unchanged }), hand)
	row(fmt.Sprintf("rebuild after editing layer %s (%d of %d layers built)", o.layer, f.rebuilt, f.layers), med(func(f figures) time.Duration { return f.edited }), hand)
	row(fmt.Sprintf("edit of %s to new version: `lock` + `build`", o.layer), med(func(f figures) time.Duration { return f.relock + f.edited }), hand)
	row("of the full build: packing the root file system", med(func(f figures) time.Duration { return f.pack }), med(func(f figures) time.Duration { return f.handSquash }))
	fmt.Fprintf(&b, "| of the full build: packages into the cache (copied, sha256 checked) | %s | — | — |\n", seconds(med(func(f figures) time.Duration { return f.fetch })))
	fmt.Fprintf(&b, "| rootfs.squashfs | %.1f MiB | %.1f MiB | %.2f |\n", mib(f.imageBytes), mib(f.handBytes), float64(f.imageBytes)/float64(f.handBytes))
	b.WriteString("\nEach run:\n\n| run | full | nothing changed | one layer edited | by hand |\n| ---: | ---: | ---: | ---: | ---: |\n")
	for i, f := range runs {
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", i+1, seconds(f.full), seconds(f.unchanged), seconds(f.edited), seconds(f.handInstall+f.handSquash))
	}
	return b.String()
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
func mib(n int64) float64            { return float64(n) / (1 << 20) }
