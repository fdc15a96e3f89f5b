// Command imgbuild (bench/imgbuild) measures image builds with the real dnf and rpm at the size
// the product really has, against the same packages installed and packed by a script, in the
// same run, and prints the figures and their ratios as Markdown (BENCHMARKS.md holds a run's
// output).
//
// There is no Rocky mirror here, so it copies the project's layers and images, builds a stand-in
// repository for every package they name (internal/testkit/testrepo: small RPMs, the host's
// kernel) and points every repository at it. The CUDA toolkit's stand-in carries a realistic
// payload (testrepo.Payload: --payload-mib of ELF segments, text and random data in thousands of
// files, compressing about as the real toolkit does), generated from a seed and kept in
// --payload-cache, so later runs do not make it again. Each run then measures, for one image:
//
//   - a full build from an empty cache (imgbuild lock, then imgbuild build);
//   - a rebuild with nothing changed;
//   - a rebuild after an edit of the top layer (--layer, a file added, locked again);
//   - a rebuild after an edit of a layer low in the stack (--deep-layer, the one above
//     nvidia-cuda): the CUDA layer comes from the cache, every layer above is built again;
//   - the baseline, what a hand-written script does: every package of the image installed with
//     dnf --installroot in one transaction (its module streams enabled first), then mksquashfs
//     of the tree with the compressor imgbuild packs with (zstd at pack.DefaultZstdLevel). No
//     layers, no cache, no normalization, no initramfs, no manifest: the least any build of the
//     same packages does.
//
// For each: wall time, bytes written by its process tree, its largest process's peak RSS and,
// for builds, the peak disk of the cache (with the version being written). Every step is a
// child process of this program. The work happens on an ext4 file system of its own (a loop
// device over a sparse file of --fs-gib under /var/tmp), ext4 without reflink as the targets
// want, sampled with statfs for the peak disk.
//
// It needs root (rpm installs files as their owners; the loop device) and the packages of
// scripts/setup-debian.sh.
//
//	go run ./bench/imgbuild [--image compute] [--layer monitoring] [--deep-layer munge] [--runs 3]
//	    [--payload-mib 3328] [--payload-cache DIR] [--fs-gib 64] [--out FILE]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
)

type options struct {
	tree, image, layer, deepLayer string
	runs                          int
	payloadMiB                    int64
	payloadCache                  string
	fsGiB                         int
	keep                          bool
}

func main() {
	if js := os.Getenv(stepEnv); js != "" {
		if err := childStep(js); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.StringVar(&o.tree, "tree", ".", "the project tree whose layers/ and images/ are built")
	flag.StringVar(&o.image, "image", "compute", "the image to build (images/<image>.toml)")
	flag.StringVar(&o.layer, "layer", "monitoring", "the top layer (compute's), which the first one-layer rebuild edits")
	flag.StringVar(&o.deepLayer, "deep-layer", "munge", "the layer low in the stack (above nvidia-cuda) that the second one-layer rebuild edits")
	flag.IntVar(&o.runs, "runs", 3, "how many times to measure each figure (the report shows the median)")
	flag.Int64Var(&o.payloadMiB, "payload-mib", 3328, "size of the CUDA toolkit stand-in's payload in MiB (the real toolkit unpacks to 3-5 GiB)")
	flag.StringVar(&o.payloadCache, "payload-cache", "/var/cache/gpucluster-bench", "where the payload's package is kept between runs")
	flag.IntVar(&o.fsGiB, "fs-gib", 64, "size of the benchmark's own ext4 file system (sparse; 0: work in a plain directory, no peak disk)")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory instead of removing it")
	out := flag.String("out", "", "also write the Markdown report to this file")
	flag.Parse()
	if err := checkEnv(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/imgbuild:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := run(ctx, o)
	if report != "" {
		fmt.Print(report)
		if *out != "" {
			err = errors.Join(err, os.WriteFile(*out, []byte(report), 0o644))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/imgbuild:", err)
		os.Exit(1)
	}
}

func checkEnv(o options) error {
	if o.runs < 1 || o.payloadMiB < 1 || o.fsGiB < 0 {
		return fmt.Errorf("--runs %d, --payload-mib %d, --fs-gib %d: want 1 or more (fs: 0 or more)", o.runs, o.payloadMiB, o.fsGiB)
	}
	if err := testrepo.MissingTools("dnf", "modifyrepo_c", "mksquashfs", "cpio", "losetup", "mkfs.ext4"); err != nil {
		return err
	}
	for _, l := range []string{o.layer, o.deepLayer} {
		if l == "" && l == o.deepLayer {
			continue // --deep-layer "": not measured
		}
		if _, err := os.Stat(filepath.Join(o.tree, "layers", l+".toml")); err != nil {
			return err
		}
	}
	_, err := os.Stat(filepath.Join(o.tree, "images", o.image+".toml"))
	return err
}

// bench is one run's work directory: a copy of the tree and the stand-in site.
type bench struct {
	options
	dir  string
	disk *workFS
	site testrepo.Site
}

func (b *bench) imagePath() string            { return filepath.Join(b.dir, "images", b.image+".toml") }
func (b *bench) layerPath(name string) string { return filepath.Join(b.dir, "layers", name+".toml") }

func run(ctx context.Context, o options) (string, error) {
	// SOURCE_DATE_EPOCH as CI sets it: the builds are then reproducible, as they are there.
	if err := os.Setenv("SOURCE_DATE_EPOCH", testrepo.ImageEpoch); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("/var/tmp", "bench-imgbuild-")
	if err != nil {
		return "", err
	}
	disk, err := mountWorkFS(ctx, dir, o.fsGiB)
	if err != nil {
		os.Remove(dir)
		return "", err
	}
	if o.keep {
		progress("work directory kept: %s", dir)
	} else {
		defer os.RemoveAll(dir)
		defer disk.close()
	}
	b := &bench{options: o, dir: dir, disk: disk}
	if err := b.setup(ctx); err != nil {
		return "", err
	}
	var runs []figures
	for i := 1; i <= o.runs; i++ {
		f, err := b.measure(ctx, i)
		if err != nil {
			return "", fmt.Errorf("run %d: %w", i, err)
		}
		runs = append(runs, f)
		if i < o.runs {
			// The report so far, on standard error: a long run cut short keeps its finished runs.
			fmt.Fprint(os.Stderr, report(o, b.site, runs))
		}
	}
	return report(o, b.site, runs), nil
}

// setup copies layers/ and images/ and builds the stand-in repository for the image, the CUDA
// toolkit's at full size. It runs in a child process too: a child started with vfork reports
// its parent's peak RSS as its own floor, so this process keeps its own small.
func (b *bench) setup(ctx context.Context) error {
	start := time.Now()
	progress("stand-in repository, CUDA toolkit of %d MiB (made once, then kept in %s)...", b.payloadMiB, b.payloadCache)
	var res stepResult
	st := step{Kind: "setup", Tree: b.tree, Dir: b.dir, Image: b.image, Large: testrepo.CUDA(b.payloadMiB<<20, b.payloadCache)}
	if _, err := b.runStep(ctx, st, &res); err != nil {
		return err
	}
	if res.Site == nil {
		return errors.New("the setup step reported no site")
	}
	b.site = *res.Site
	progress("stand-in repository: %d packages in %s", b.site.Packages, since(start))
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench/imgbuild: "+format+"\n", args...)
}

func since(start time.Time) string { return time.Since(start).Round(10 * time.Millisecond).String() }
