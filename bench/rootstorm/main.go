// Command rootstorm measures nodes fetching a root image at once at the link's limit: N nodes,
// each a network namespace whose link and bootd's are shaped by tc to one rate, fetch a ≥ 1 GiB
// root image through bootd-fetch (chunks from each other and from bootd), against single-server
// HTTP of the whole file (bootd, and nginx) and against the physical limit (size ÷ rate); then
// the same nodes update to a version with one layer changed. It prints a Markdown report.
//
// What is real: bootd (its HTTP, chunk store, peer lists), bootd-fetch (the very program a node
// runs in its initramfs, one process per node namespace, with its chunk server), curl for the
// whole-file baselines, nginx, the kernel's TCP through veths, tc's token buckets, mksquashfs for
// both versions. What is not: the nodes are processes, not PCs; they write into one shared file
// (50 copies of the image fit neither this machine's RAM nor its spare disk), though each
// receives and checks every chunk itself; and the single-server storms are stopped after
// --baseline-secs: their time until all is N × size ÷ the rate they sustained while they ran.
//
//	go run ./bench/rootstorm --bootd bin/bootd [--n 10,50] [--size-mib 1024] [--rate-mbit 48] [--out FILE]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	bootd        string
	sizes        []int
	sizeMiB      int
	layerMiB     int
	rateMbit     int
	baselineSecs int
	work         string
	keep         bool
}

func main() {
	var (
		bootd    = flag.String("bootd", "bin/bootd", "the bootd binary; bootd-fetch must be beside it (make build)")
		ns       = flag.String("n", "10,50", "storm sizes: nodes fetching at once")
		size     = flag.Int("size-mib", 1024, "size of the root file system's files, MiB (the squashfs is about as large: random data)")
		layer    = flag.Int("layer-mib", 4, "size of the files the one-layer change adds, MiB")
		rate     = flag.Int("rate-mbit", 48, "every link's rate, Mbit/s (bootd's and each node's, both ways)")
		baseline = flag.Int("baseline-secs", 60, "how long each single-server storm runs before it is stopped and extrapolated")
		out      = flag.String("out", "", "also write the Markdown report to this file")
		keep     = flag.Bool("keep", false, "keep the work directory (logs, images)")
	)
	flag.Parse()
	var sizes []int
	for _, f := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 99 {
			fmt.Fprintf(os.Stderr, "rootstorm: --n %q: want sizes from 1 to 99\n", *ns)
			os.Exit(2)
		}
		sizes = append(sizes, n)
	}
	o := options{bootd: *bootd, sizes: sizes, sizeMiB: *size, layerMiB: *layer, rateMbit: *rate, baselineSecs: *baseline, keep: *keep}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := run(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rootstorm: %v\n", err)
		os.Exit(1)
	}
	fmt.Print(report)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "rootstorm: %v\n", err)
			os.Exit(1)
		}
	}
}

func run(ctx context.Context, o options) (string, error) {
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("needs root (network namespaces, tc)")
	}
	bin, err := filepath.Abs(o.bootd)
	if err != nil {
		return "", err
	}
	o.bootd = bin
	if _, err := os.Stat(filepath.Join(filepath.Dir(bin), "bootd-fetch")); err != nil {
		return "", fmt.Errorf("no bootd-fetch beside %s: run make build", bin)
	}
	o.work, err = os.MkdirTemp("/var/tmp", "rootstorm-")
	if err != nil {
		return "", err
	}
	if !o.keep {
		defer os.RemoveAll(o.work)
	} else {
		fmt.Fprintf(os.Stderr, "rootstorm: work directory %s kept\n", o.work)
	}
	start := time.Now()
	progress("building the two versions' root images (%d MiB of files, then %d MiB more in one layer)", o.sizeMiB, o.layerMiB)
	imgs, err := buildImages(ctx, o)
	if err != nil {
		return "", err
	}
	maxN := 0
	for _, n := range o.sizes {
		maxN = max(maxN, n)
	}
	lab, err := newLab(ctx, o, maxN)
	if err != nil {
		return "", err
	}
	defer lab.close()
	var res results
	res.opts, res.imgs, res.start, res.loadBefore = o, imgs, start, loadavg()
	for _, n := range o.sizes {
		r, err := lab.stormSize(ctx, imgs, n)
		if err != nil {
			return "", err
		}
		res.storms = append(res.storms, r)
	}
	progress("version update: %d nodes move to the version with one layer changed", maxN)
	if res.update, err = lab.update(ctx, imgs, maxN); err != nil {
		return "", err
	}
	res.took, res.loadAfter = time.Since(start), loadavg()
	return res.markdown(), nil
}

// loadavg is /proc/loadavg's three averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rootstorm %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
