// Command imgbuild (bench/imgbuild) measures image builds with the real dnf and rpm against the
// same packages installed by hand, in the same run, and prints the figures and their ratios as
// Markdown (BENCHMARKS.md holds a run's output).
//
// There is no Rocky mirror here, so it copies the project's layers and images, builds a stand-in
// repository for every package they name (internal/testkit/testrepo: small RPMs, the host's kernel) and
// points every repository at it. Each run then measures, for one image:
//
//   - a full build from an empty cache (imgbuild lock, then imgbuild build);
//   - a rebuild with nothing changed (every layer from the cache);
//   - a rebuild after one layer's edit (a file added to it, locked again): that layer and the
//     layers above it are built, the ones below come from the cache;
//   - the baseline, what a hand-written script does: every package of the image installed with
//     dnf --installroot in one transaction (its module streams enabled first), then mksquashfs
//     of the tree, once with its defaults (gzip) and once with the compressor imgbuild packs with
//     (zstd at pack.DefaultZstdLevel), so that the comparison does not rest on the compressor.
//     No layers, no cache, no normalization, no initramfs, no manifest: the least any build of
//     the same packages does.
//
// It needs root (rpm installs files as their owners) and the packages of scripts/setup-debian.sh.
//
//	go run ./bench/imgbuild [--image compute] [--layer monitoring] [--runs 3] [--out FILE]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/imgbuild"
	"github.com/labcluster/gpucluster/internal/pack"
	"github.com/labcluster/gpucluster/internal/rpmcmd"
	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
)

type options struct {
	tree, image, layer string
	runs               int
	keep               bool
}

func main() {
	var o options
	flag.StringVar(&o.tree, "tree", ".", "the project tree whose layers/ and images/ are built")
	flag.StringVar(&o.image, "image", "compute", "the image to build (images/<image>.toml)")
	flag.StringVar(&o.layer, "layer", "monitoring", "the layer the one-layer rebuild edits (default: compute's top layer, the best case)")
	flag.IntVar(&o.runs, "runs", 3, "how many times to measure each figure (the report shows the median)")
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
	if o.runs < 1 {
		return fmt.Errorf("--runs %d: want 1 or more", o.runs)
	}
	if err := testrepo.MissingTools("dnf", "modifyrepo_c", "mksquashfs", "cpio"); err != nil {
		return err
	}
	for _, p := range []string{filepath.Join(o.tree, "images", o.image+".toml"), filepath.Join(o.tree, "layers", o.layer+".toml")} {
		if _, err := os.Stat(p); err != nil {
			return err
		}
	}
	return nil
}

// bench is one run's work directory: a copy of the tree and the stand-in site.
type bench struct {
	options
	dir  string
	site testrepo.Site
	log  *logrus.Logger
}

func (b *bench) imagePath() string { return filepath.Join(b.dir, "images", b.image+".toml") }
func (b *bench) layerPath() string { return filepath.Join(b.dir, "layers", b.layer+".toml") }

func (b *bench) opts(cache, version string) imgbuild.Options {
	return imgbuild.Options{SitePath: b.site.Path, OutDir: filepath.Join(b.dir, "out"), CacheDir: filepath.Join(b.dir, cache), Version: version, Log: b.log}
}

func run(ctx context.Context, o options) (string, error) {
	// SOURCE_DATE_EPOCH as CI sets it: the builds are then reproducible, as they are there.
	if err := os.Setenv("SOURCE_DATE_EPOCH", testrepo.ImageEpoch); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("/var/tmp", "bench-imgbuild-")
	if err != nil {
		return "", err
	}
	if o.keep {
		progress("work directory kept: %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	b := &bench{options: o, dir: dir, log: logrus.New()}
	b.log.SetLevel(logrus.WarnLevel)
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
	}
	return report(o, b.site, runs), nil
}

// setup copies layers/ and images/ and builds the stand-in repository for the image.
func (b *bench) setup(ctx context.Context) error {
	start := time.Now()
	site, err := testrepo.StandInTree(ctx, b.tree, b.dir, b.image)
	if err != nil {
		return err
	}
	b.site = site
	progress("stand-in repository: %d packages in %s", site.Packages, since(start))
	return nil
}

// figures are one run's measurements.
type figures struct {
	lock, full, fetch, install, pack time.Duration // imgbuild lock; build from an empty cache, and three of its steps
	unchanged                        time.Duration // rebuild, nothing changed
	relock, edited                   time.Duration // lock and rebuild after the layer's edit
	rebuilt, layers                  int           // layers the edited rebuild built, of all
	handInstall                      time.Duration // the baseline's dnf transaction
	handGzip, handZstd               time.Duration // the baseline's mksquashfs: defaults, and imgbuild's compressor
	imageBytes, gzipBytes, zstdBytes int64         // rootfs.squashfs sizes
}

func (b *bench) measure(ctx context.Context, i int) (figures, error) {
	var f figures
	cache := fmt.Sprintf("cache-%d", i)
	var err error
	if f.lock, err = b.lock(ctx); err != nil {
		return f, err
	}
	full, err := b.build(ctx, cache, fmt.Sprintf("%d-full", i))
	if err != nil {
		return f, err
	}
	f.full, f.fetch, f.pack = full.Total, full.Fetch, full.Pack
	for _, l := range full.Layers {
		f.install += l.Duration
	}
	if f.imageBytes, err = fileSize(filepath.Join(full.Dir, "rootfs.squashfs")); err != nil {
		return f, err
	}
	same, err := b.build(ctx, cache, fmt.Sprintf("%d-unchanged", i))
	if err != nil {
		return f, err
	}
	if built := builtLayers(same); len(built) != 0 {
		return f, fmt.Errorf("a rebuild with nothing changed built %s", strings.Join(built, ", "))
	}
	f.unchanged = same.Total
	if err := editLayer(b.layerPath(), i); err != nil {
		return f, err
	}
	if f.relock, err = b.lock(ctx); err != nil {
		return f, err
	}
	edited, err := b.build(ctx, cache, fmt.Sprintf("%d-edited", i))
	if err != nil {
		return f, err
	}
	built := builtLayers(edited)
	f.edited, f.rebuilt, f.layers = edited.Total, len(built), len(edited.Layers)
	if len(built) == 0 || built[0] != b.layer {
		return f, fmt.Errorf("after editing %s the rebuild built %v, want %s first", b.layer, built, b.layer)
	}
	err = b.byHand(ctx, i, &f)
	progress("run %d: full %s, unchanged %s, %s edited %s (%d of %d layers), by hand %s + %s (gzip) or %s (zstd)",
		i, since0(f.full), since0(f.unchanged), b.layer, since0(f.edited), f.rebuilt, f.layers, since0(f.handInstall), since0(f.handGzip), since0(f.handZstd))
	return f, err
}

func (b *bench) lock(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	_, _, err := imgbuild.Lock(ctx, b.imagePath(), b.opts("cache-lock", ""))
	return time.Since(start), err
}

func (b *bench) build(ctx context.Context, cache, version string) (*imgbuild.Report, error) {
	return imgbuild.Build(ctx, b.imagePath(), b.opts(cache, version))
}

func builtLayers(r *imgbuild.Report) []string {
	var built []string
	for _, l := range r.Layers {
		if !l.Cached {
			built = append(built, l.Layer)
		}
	}
	return built
}

// editLayer adds a file to the layer, as an admin's edit of a configuration file would.
func editLayer(path string, i int) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "\n[[files]]\npath = \"/etc/bench-edit-%d\"\ncontent = \"edit %d\\n\"\n", i, i)
	return errors.Join(err, f.Close())
}

// byHand installs the image's packages into an empty root with dnf in one transaction, then
// packs the root with mksquashfs twice: with its defaults, and with imgbuild's compressor.
func (b *bench) byHand(ctx context.Context, i int, f *figures) error {
	env, err := b.handEnv(filepath.Join(b.dir, fmt.Sprintf("hand-%d", i)))
	if err != nil {
		return err
	}
	start := time.Now()
	if err := env.EnableModules(ctx); err != nil {
		return err
	}
	if _, err := env.DNF(ctx, append([]string{"install"}, b.site.Names...)...); err != nil {
		return err
	}
	f.handInstall = time.Since(start)
	dir := filepath.Dir(env.Root)
	if f.handGzip, f.gzipBytes, err = squash(ctx, env.Root, filepath.Join(dir, "gzip.squashfs")); err != nil {
		return err
	}
	f.handZstd, f.zstdBytes, err = squash(ctx, env.Root, filepath.Join(dir, "zstd.squashfs"), "-comp", "zstd", "-Xcompression-level", strconv.Itoa(pack.DefaultZstdLevel))
	return err
}

// squash runs mksquashfs on tree, as a script would, and returns its time and the file's size.
func squash(ctx context.Context, tree, out string, opts ...string) (time.Duration, int64, error) {
	start := time.Now()
	args := append([]string{tree, out, "-noappend", "-quiet"}, opts...)
	if msg, err := exec.CommandContext(ctx, "mksquashfs", args...).CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("mksquashfs %s: %v: %s", strings.Join(opts, " "), err, msg)
	}
	took := time.Since(start)
	size, err := fileSize(out)
	return took, size, err
}

// handEnv is dnf set up on an empty root under dir for the stand-in site's repositories and the
// module streams the layers enable.
func (b *bench) handEnv(dir string) (*rpmcmd.Env, error) {
	env := &rpmcmd.Env{Root: filepath.Join(dir, "root"), WorkDir: filepath.Join(dir, "work"), Repos: b.site.Repos(), Modules: b.site.Streams, Log: b.log}
	return env, os.MkdirAll(env.Root, 0o755)
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench/imgbuild: "+format+"\n", args...)
}

func since(start time.Time) string { return since0(time.Since(start)) }
func since0(d time.Duration) string {
	return d.Round(10 * time.Millisecond).String()
}
