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

// medianCost is the median of each of a cost's figures, separately.
func medianCost(runs []figures, get func(figures) cost) cost {
	return cost{
		Wall:     median(runs, func(f figures) time.Duration { return get(f).Wall }),
		Written:  median(runs, func(f figures) int64 { return get(f).Written }),
		PeakRSS:  median(runs, func(f figures) int64 { return get(f).PeakRSS }),
		PeakDisk: median(runs, func(f figures) int64 { return get(f).PeakDisk }),
	}
}

func add(a, b cost) cost {
	return cost{Wall: a.Wall + b.Wall, Written: a.Written + b.Written, PeakRSS: max(a.PeakRSS, b.PeakRSS), PeakDisk: max(a.PeakDisk, b.PeakDisk)}
}

// report prints the medians with their ratios to the script and to the full build, the targets
// and whether the builds were byte-identical.
func report(o options, site testrepo.Site, runs []figures) string {
	script := medianCost(runs, func(f figures) cost { return add(f.hand, f.squash) })
	full := medianCost(runs, func(f figures) cost { return f.full })
	same := medianCost(runs, func(f figures) cost { return f.unchanged })
	edited := medianCost(runs, func(f figures) cost { return f.edited })
	deep := medianCost(runs, func(f figures) cost { return f.deep })
	tree := median(runs, func(f figures) int64 { return f.treeBytes })
	img := median(runs, func(f figures) int64 { return f.imageBytes })
	scriptImg := median(runs, func(f figures) int64 { return f.scriptBytes })
	f0 := runs[0]

	var b strings.Builder
	fmt.Fprintf(&b, "### Image build at real size: %s, median of %d runs\n\n", o.image, len(runs))
	fmt.Fprintf(&b, "CUDA toolkit stand-in: %.2f GiB payload (testrepo.Payload); the image's unpacked tree %.2f GB, rootfs.squashfs %.2f GB (imgbuild) and %.2f GB (script). Stand-in repository: %d packages. Script: `dnf --installroot` of the image's %d packages in one transaction, then `mksquashfs -comp zstd -Xcompression-level %d`. Ratios are to the script's time (× script) and to imgbuild's full build (× full). Written: bytes the step's process tree wrote. Peak disk: the cache at its fullest during the step, with the version being written. Peak RSS: the step's largest process.\n\n",
		float64(o.payloadMiB)/1024, gb(tree), gb(img), gb(scriptImg), site.Packages, len(site.Names), pack.DefaultZstdLevel)
	b.WriteString("| step | time | × script | × full | written | peak disk | peak RSS |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	row := func(name string, c cost) {
		fmt.Fprintf(&b, "| %s | %.1f s | %.2f | %.3f | %.2f GB | %s | %.0f MiB |\n", name, c.Wall.Seconds(),
			ratio(c.Wall, script.Wall), ratio(c.Wall, full.Wall), gb(c.Written), diskCell(c.PeakDisk), mib(c.PeakRSS))
	}
	row("script: dnf --installroot + mksquashfs", script)
	row("full build, empty cache (`imgbuild build` from the lock)", full)
	row("full build with its lock (`imgbuild lock` + `build`)", add(medianCost(runs, func(f figures) cost { return f.lock }), full))
	row("nothing changed", same)
	row(fmt.Sprintf("top layer (%s) edited: %d of %d layers built", o.layer, f0.rebuilt, f0.layers), edited)
	if o.deepLayer != "" {
		row(fmt.Sprintf("layer above nvidia-cuda (%s) edited: %d of %d layers built", o.deepLayer, f0.deepRebuilt, f0.layers), deep)
	}
	b.WriteString("\n")
	targets(&b, o, full, same, edited, script, maxDisk(runs), tree, img)
	identical(&b, runs)
	steps(&b, runs)
	return b.String()
}

// targets says, for each of issue 29's targets, the figure and whether it is met.
func targets(b *strings.Builder, o options, full, same, edited, script cost, disk, tree, img int64) {
	b.WriteString("| target | measured | |\n| --- | ---: | --- |\n")
	t := func(name string, v, limit float64, unit string) {
		verdict := "met"
		if v > limit {
			verdict = "**missed**"
		}
		fmt.Fprintf(b, "| %s | %.3f%s | %s |\n", name, v, unit, verdict)
	}
	t("full build ≤ 1.3× script", ratio(full.Wall, script.Wall), 1.3, "×")
	t("nothing changed ≤ 0.05× full", ratio(same.Wall, full.Wall), 0.05, "×")
	t(fmt.Sprintf("top layer (%s) edited ≤ 0.1× full", o.layer), ratio(edited.Wall, full.Wall), 0.1, "×")
	if disk > 0 {
		limit := 1.5*float64(tree) + float64(img)
		t(fmt.Sprintf("peak cache disk ≤ 1.5× unpacked tree + packed image (%.1f GB)", limit/1e9), float64(disk)/1e9, limit/1e9, " GB")
	}
	b.WriteString("\n")
}

func maxDisk(runs []figures) int64 {
	var m int64
	for _, f := range runs {
		m = max(m, f.full.PeakDisk, f.unchanged.PeakDisk, f.edited.PeakDisk, f.deep.PeakDisk)
	}
	return m
}

// identical says whether the builds gave the same rootfs.squashfs: the full and the unchanged
// build of each run, and the full builds across runs (each from an empty cache).
func identical(b *strings.Builder, runs []figures) {
	ok := true
	for _, f := range runs {
		ok = ok && f.imageSHA == f.sameSHA && f.imageSHA == runs[0].imageSHA
	}
	verdict := "identical"
	if !ok {
		verdict = "**differ**"
	}
	fmt.Fprintf(b, "rootfs.squashfs of the full builds (each from an empty cache) and of the unchanged rebuilds: %s, sha256 %s.\n\n", verdict, runs[0].imageSHA)
}

// steps lists every run's figures.
func steps(b *strings.Builder, runs []figures) {
	b.WriteString("Each run (time / written / peak disk):\n\n| run | full | nothing changed | top edited | deep edited | script install | script mksquashfs | lock |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	cell := func(c cost) string {
		return fmt.Sprintf("%.1f s / %.1f GB / %s", c.Wall.Seconds(), gb(c.Written), diskCell(c.PeakDisk))
	}
	for i, f := range runs {
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %s | %.1f s |\n", i+1, cell(f.full), cell(f.unchanged), cell(f.edited), cell(f.deep),
			cell(f.hand), cell(f.squash), f.lock.Wall.Seconds())
	}
	fmt.Fprintf(b, "\nOf the first full build: packages into the cache %.1f s, layers %.1f s, normalizing and packing %.1f s; of the top layer's rebuild: normalizing and packing %.1f s; cache after the run's builds %.1f GB.\n",
		runs[0].fetch.Seconds(), runs[0].install.Seconds(), runs[0].pack.Seconds(), runs[0].editedPack.Seconds(), gb(runs[0].cacheAfter))
}

func ratio(a, b time.Duration) float64 { return a.Seconds() / b.Seconds() }
func gb(n int64) float64               { return float64(n) / 1e9 }
func mib(n int64) float64              { return float64(n) / (1 << 20) }

func diskCell(n int64) string {
	if n == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f GB", gb(n))
}
