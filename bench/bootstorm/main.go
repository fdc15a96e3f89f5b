// Command bootstorm measures bootd under a PXE boot storm against dnsmasq (DHCP + TFTP) with
// nginx (HTTP) serving the same files, in the same run, and prints the figures and their
// bootd/baseline ratios as Markdown (BENCHMARKS.md holds a run's output).
//
// It builds a virtual lab (internal/testkit/vlab: a network namespace with a bridge) and one more
// namespace per simulated machine, each with its own MAC on a veth cabled to the bridge. For
// every N and for each server, freshly started, N machines boot at once as a BIOS PXE ROM would
// get as far as the root image: DHCP DISCOVER/OFFER/REQUEST/ACK with vendor class
// PXEClient:Arch:00000 over a raw socket (nclient4), TFTP of the boot file the ACK names
// (undionly.kpxe), then HTTP of the image's kernel, initramfs and root file system (an artifact
// written with internal/artifact, its rootfs random data). Each N is stormed in pairs (one storm
// per server, the servers taking turns going first; by default 30 pairs at N = 10, 6 at 50, 5 at
// 200: --repeat), and the report holds each figure's median with the interval that holds the
// true median with 95% confidence (with five pairs or fewer, their range, at less): a storm of
// 10 lasts about a second, and one storm's ratio to the baseline ranged over 0.8–1.3 for one
// build on a shared 2-core machine (docs/benchmarks-log.md, items 15, 17 and 18). A miss whose interval
// still reaches the target is reported as one within the run's noise. The clients all live in
// this one process: a goroutine per machine creates its sockets from a thread switched into the
// machine's namespace, so 200 machines cost 200 namespaces but no processes.
//
// It needs root and the Debian packages of scripts/setup-debian.sh (dnsmasq, nginx, ipxe,
// linux-image-amd64, busybox-static). All traffic stays inside the namespaces it creates, and it
// removes them and every process it started when it ends, also on error or Ctrl-C.
//
//	go run ./bench/bootstorm --bootd bin/bootd [--n 10,50,200] [--repeat PAIRS] [--rootfs-mib 256] [--out FILE]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/sha256hex"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

func main() {
	var (
		bootdBin  = flag.String("bootd", "bin/bootd", "the bootd binary to measure")
		ns        = flag.String("n", "10,50,200", "storm sizes: machines booting at once")
		rootfsMiB = flag.Int("rootfs-mib", 256, "size of the image's root file system (random data), MiB")
		out       = flag.String("out", "", "also write the Markdown report to this file")
		ping      = flag.Bool("dnsmasq-ping", false, "leave dnsmasq's ICMP check before an offer on (3 s per new client, serial)")
		keep      = flag.Bool("keep", false, "keep the work directory (logs of every server) instead of removing it")
		pcap      = flag.String("pcap", "", "record each storm's DHCP, TFTP and ARP packets on the bridge (tcpdump) into this directory, as N<n>-<server>[-<pair>].pcap")
		repeat    = flag.Int("repeat", 0, "storms per server and N (pairs); the report holds each figure's median (the servers take turns going first) and the interval that holds the true median with 95% confidence, which more pairs narrow. 0: as many as 300 machines' boots need, from 5 to 30 (30 at N = 10, 6 at 50, 5 at 200)")
		control   = flag.Bool("control", true, "storm the baseline twice in each pair: its ratio to itself shows how far a ratio strays when nothing differs")
		scrape    = flag.Bool("scrape", true, "storm bootd once more in each pair while Prometheus scrapes its /metrics every second: what serving metrics costs (needs Debian's prometheus)")
	)
	flag.Parse()
	sizes, err := parseSizes(*ns)
	if err == nil && *repeat < 0 {
		err = fmt.Errorf("--repeat %d: want at least 1 storm per server and N, or 0 for the default", *repeat)
	}
	if err == nil {
		err = checkEnv(*bootdBin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bootstorm:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := run(ctx, options{bootd: *bootdBin, sizes: sizes, rootfs: int64(*rootfsMiB) << 20, repeat: *repeat, control: *control, scrape: *scrape, keep: *keep, ping: *ping, pcap: *pcap})
	if report != "" {
		fmt.Print(report)
		if *out != "" {
			if werr := os.WriteFile(*out, []byte(report), 0o644); werr != nil {
				err = errors.Join(err, werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bootstorm:", err)
		os.Exit(1)
	}
}

type options struct {
	bootd  string
	sizes  []int
	rootfs int64
	repeat int // storms per server and N, or 0: pairsFor
	// control adds a second baseline storm to each pair, judged against the first as bootd is:
	// an A/A comparison, whose ratios are the noise of this machine.
	control bool
	// scrape adds bootd's storm under a Prometheus scraping /metrics every second, judged
	// against bootd's own.
	scrape bool
	keep   bool
	ping   bool
	pcap   string // directory for per-storm packet captures, or ""
}

// schedulePerMachine gives the process a P per machine of a storm of n (and some for the rest):
// the machines are separate PCs, so the kernel must share the CPUs between them as between
// processes. With a P per core, one machine's download loop (which seldom blocks) keeps its P
// for Go's 10 ms time slice while another machine's TFTP ACK or DHCP REQUEST waits for it, and
// the figures measure the client's scheduler, not the server. Set per storm size, not once for
// the run's largest: Go's collector runs a quarter of the Ps as mark workers, so a storm of 10
// beside one of 200 had 52 of the client's threads contending for the two cores at each
// collection (docs/benchmarks-log.md, item 17).
func schedulePerMachine(n int) {
	runtime.GOMAXPROCS(max(runtime.NumCPU(), n+8))
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 240 {
			return nil, fmt.Errorf("--n: %q: want sizes from 1 to 240 (the discovery pool)", f)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("--n: %d twice: to storm a size more often, use --repeat", n)
		}
		out = append(out, n)
	}
	return out, nil
}

func checkEnv(bootdBin string) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, DHCP and TFTP ports)")
	}
	if _, err := os.Stat(bootdBin); err != nil {
		return fmt.Errorf("bootd binary: %w (make build)", err)
	}
	for _, tool := range []string{"ip", "dnsmasq", "nginx", "wget", "prometheus"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (./scripts/setup-debian.sh)", tool)
		}
	}
	if _, err := os.Stat(filepath.Join(vlab.IPXEDir, "undionly.kpxe")); err != nil {
		return fmt.Errorf("iPXE binaries: %w (apt-get install ipxe)", err)
	}
	return nil
}

// Image the storm fetches: images/<imageName>/<imageVersion>/... (compute is a role image, so
// bootd verifies it at start-up, before it answers, as it would in a lab).
const (
	imageName    = "compute"
	imageVersion = "1"
)

func run(ctx context.Context, o options) (report string, err error) {
	// Under /var/tmp: a disk, as /var/lib/bootd is on an appliance (bootd fsyncs its inventory).
	work, err := os.MkdirTemp("/var/tmp", "bootstorm-")
	if err != nil {
		return "", err
	}
	defer func() {
		if o.keep {
			fmt.Fprintln(os.Stderr, "bootstorm: work directory kept:", work)
			return
		}
		os.RemoveAll(work)
	}()

	fmt.Fprintln(os.Stderr, "bootstorm: writing the test image")
	spec, err := writeImage(work, o.rootfs)
	if err != nil {
		return "", err
	}
	lab, err := vlab.New(ctx, fmt.Sprintf("bstorm%d", os.Getpid()), netip.MustParsePrefix("10.80.0.1/24"))
	if err != nil {
		return "", err
	}
	defer func() {
		if cerr := lab.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	spec.Server = lab.Addr.Addr()

	maxN := slices.Max(o.sizes) // parseSizes gives at least one
	fmt.Fprintf(os.Stderr, "bootstorm: %d machine namespaces on %s\n", maxN, lab.Name)
	clients, err := addClients(ctx, lab, maxN)
	defer func() {
		for _, c := range clients {
			c.ns.Close()
		}
	}()
	if err != nil {
		return "", err
	}

	servers := []contender{
		{&bootdServer{lab: lab, bin: o.bootd, dir: filepath.Join(work, "bootd")}, sideBootd},
		{&baselineServer{lab: lab, dir: filepath.Join(work, "baseline"), filesRoot: filepath.Join(work, "bootd"), ping: o.ping}, sideBaseline},
	}
	if o.control {
		servers = append(servers, contender{&baselineServer{lab: lab, dir: filepath.Join(work, "control"),
			filesRoot: filepath.Join(work, "bootd"), ping: o.ping, again: true}, sideControl})
	}
	if o.scrape {
		servers = append(servers, contender{&scrapedBootd{bootdServer: bootdServer{lab: lab, bin: o.bootd, dir: filepath.Join(work, "bootd")}}, sideScraped})
	}
	res := results{machine: describeMachine(), rootfs: o.rootfs, spec: spec}
	up := len(clients) // links up: AddHost leaves every link up
	for _, n := range o.sizes {
		if err := cable(ctx, clients, up, n); err != nil {
			return res.markdown(), err
		}
		up = n
		schedulePerMachine(n)
		for pair := range o.pairs(n) {
			for _, s := range turn(servers, pair) {
				if err := ctx.Err(); err != nil {
					return res.markdown(), err
				}
				r, err := storm(ctx, lab, s, clients[:n], spec, o.pcapBase(n, s, pair))
				if err != nil {
					return res.markdown(), fmt.Errorf("N=%d %s, storm %d of %d: %w", n, s.Name(), pair+1, o.pairs(n), err)
				}
				fmt.Fprintf(os.Stderr, "bootstorm: N=%d %s (%d of %d): %s\n", n, s.Name(), pair+1, o.pairs(n), r.summary())
				res.add(r, s.side)
			}
		}
	}
	return res.markdown(), nil
}

// contender is a server and the side of the comparison its storms are filed under.
type contender struct {
	server
	side side
}

// turn is the servers in the order they storm in the pair-th pair: the list rotated by one place
// each pair, so that every server storms in every place of a pair in turn (two servers: first,
// then second; three: first, second, third), and what a place in the pair does to a storm falls
// on each server alike (with five pairs of three, nearly: a server's places 2, 2 and 1 times).
// That balances the place only, not what ran just before a storm and left something for it (page
// cache, load, a warm CPU): over five pairs of three, the storm right after bootd's is the
// baseline's 3 times and the control's once (bootd's fifth ends the size). settle is there for
// that (docs/benchmarks-log.md, item 16).
func turn[T any](servers []T, pair int) []T {
	k := pair % len(servers)
	return append(slices.Clone(servers[k:]), servers[:k]...)
}

// pairs is how many storms each server makes at N = n: --repeat, or by default pairsFor(n).
func (o options) pairs(n int) int {
	if o.repeat > 0 {
		return o.repeat
	}
	return pairsFor(n)
}

// pairsFor is the default number of pairs at N = n: enough that each side's storms boot about 300
// machines, from 5 to 30. A figure's noise is a storm's: at N = 10, runs of five or six pairs
// put bootd / control anywhere in 0.93–1.17, thirty pairs in 0.97–1.02 (docs/benchmarks-log.md, item 17);
// a storm of 200 averages over its machines, and five pairs of it take six minutes.
func pairsFor(n int) int {
	return min(max(5, (300+n-1)/n), 30)
}

// pcapBase is where storm pair of server s at N = n records its packets (without suffix), or ""
// when not recording.
func (o options) pcapBase(n int, s server, pair int) string {
	if o.pcap == "" {
		return ""
	}
	name := fmt.Sprintf("N%d-%s", n, strings.ReplaceAll(s.Name(), "+", "-"))
	if o.pairs(n) > 1 {
		name += fmt.Sprintf("-%d", pair+1)
	}
	return filepath.Join(o.pcap, name)
}

// writeImage publishes the test image under work/bootd/images (bootd's --images; nginx's root is
// work/bootd) and returns what clients fetch. Kernel and initramfs are vlab's test image; the
// root file system is random data (incompressible, like a squashfs).
func writeImage(work string, rootfsSize int64) (clientSpec, error) {
	stage := filepath.Join(work, "stage")
	release, err := vlab.BuildTestImage(stage)
	if err != nil {
		return clientSpec{}, err
	}
	if err := writeRandom(filepath.Join(stage, "rootfs.squashfs"), rootfsSize); err != nil {
		return clientSpec{}, err
	}
	m := artifact.Manifest{
		Name: imageName, Version: imageVersion, Created: time.Unix(0, 0).UTC(),
		Kernel: artifact.Kernel{File: "vmlinuz", Release: release}, Initrds: []string{"initramfs.img"},
		Rootfs: &artifact.Rootfs{File: "rootfs.squashfs", Format: "squashfs"},
		Layers: []artifact.Layer{{Name: "bootstorm", Digest: "none"}},
	}
	images := filepath.Join(work, "bootd", "images")
	dir, err := artifact.Write(images, m, stage)
	if err != nil {
		return clientSpec{}, err
	}
	os.RemoveAll(stage)
	img, err := artifact.Open(dir)
	if err != nil {
		return clientSpec{}, err
	}
	written := img.Manifest
	spec := clientSpec{WantBoot: "undionly.kpxe"}
	for _, f := range m.Referenced() {
		fi := written.Files[f]
		spec.Files = append(spec.Files, httpFile{Path: fmt.Sprintf("/images/%s/%s/%s", imageName, imageVersion, f), Size: fi.Size, SHA256: fi.SHA256})
		// Read it once: both servers then serve from the page cache.
		if err := warm(filepath.Join(dir, f)); err != nil {
			return clientSpec{}, err
		}
	}
	// The disk quiet before the storms: bootd fsyncs its leases (dnsmasq does not), and with the
	// image just written (and the stage deleted) a journal commit would wait for that writeback,
	// which is the benchmark's doing, not a lab's.
	syscall.Sync()
	spec.BootSize, spec.BootSHA, err = sizeAndHash(filepath.Join(vlab.IPXEDir, spec.WantBoot))
	return spec, err
}

func writeRandom(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	rnd, err := os.Open("/dev/urandom")
	if err != nil {
		f.Close()
		return err
	}
	defer rnd.Close()
	_, err = io.CopyN(f, rnd, size)
	return errors.Join(err, f.Close())
}

func warm(path string) error {
	_, _, err := sizeAndHash(path)
	return err
}

func sizeAndHash(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	sum, n, err := sha256hex.Of(f)
	return n, sum, err
}

// addClients makes n machines on the lab's bridge, each a vlab host (own namespace, eth0 with
// MAC 52:54:00:b5:HH:LL).
func addClients(ctx context.Context, lab *vlab.Lab, n int) ([]*client, error) {
	var out []*client
	for i := range n {
		mac := net.HardwareAddr{0x52, 0x54, 0x00, 0xb5, byte(i >> 8), byte(i)}
		h, err := lab.AddHost(ctx, fmt.Sprintf("m%d", i), mac)
		if err != nil {
			return out, err
		}
		ns, err := vlab.OpenNetns(h.Name)
		if err != nil {
			return out, err
		}
		out = append(out, &client{ns: ns, mac: mac, verify: i == 0})
	}
	return out, nil
}

// storm boots the clients at once against a freshly started s and measures; with pcapBase, it
// records the storm's packets to pcapBase.pcap and its client timeline to pcapBase.timeline.
func storm(ctx context.Context, lab *vlab.Lab, s server, clients []*client, spec clientSpec, pcapBase string) (round, error) {
	r := round{n: len(clients)}
	if err := resetClients(ctx, lab, clients); err != nil {
		return r, err
	}
	if base := pcapBase; base != "" {
		stopCapture, err := capture(ctx, lab, base+".pcap")
		if err != nil {
			return r, err
		}
		defer stopCapture()
		defer func() { _ = os.WriteFile(base+".timeline", []byte(r.timeline()), 0o644) }()
	}
	if err := s.Start(ctx); err != nil {
		s.Stop()
		return r, err
	}
	defer s.Stop()
	defer func() {
		for _, c := range clients {
			c.closeDHCP()
		}
	}()
	for _, c := range clients {
		if err := c.prepare(); err != nil {
			return r, err
		}
	}
	settle()
	r.load = loadavg() // what the storm begins under: its server up, the last storm settled
	before, err := measure(s.Leaders())
	if err != nil {
		return r, err
	}
	// Every storm is bounded: a minute plus three seconds a machine (a 256 MiB image at 100 MB/s).
	ctx, cancel := context.WithTimeout(ctx, time.Minute+time.Duration(len(clients))*3*time.Second)
	defer cancel()
	// The barrier: every machine waits on start, then all go at once.
	start := make(chan struct{})
	r.clients = make([]clientResult, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r.clients[i] = c.run(ctx, spec)
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	r.wall = time.Since(t0)
	after, err := measure(s.Leaders())
	if err != nil {
		return r, err
	}
	r.cpu = after.CPU - before.CPU
	r.hwm = after.HWM
	r.procs = after.Procs
	r.t0 = t0
	return r, nil
}

// settleTime is how long a storm waits, its server started, before it begins.
const settleTime = time.Second

// settle lets what ran before a storm end before the storm begins: the last storm's garbage in
// this process (collected now, not during the storm), the kernel's work after the last server
// stopped, and the new server's start (bootd reads and hashes the whole image). Without it, the
// server that stopped last and the one that starts next decided how busy the machine was when
// a storm began, and the control measured slower than the baseline in 27 and 28 of 45 figures
// (docs/benchmarks-log.md, item 16).
func settle() {
	runtime.GC()
	time.Sleep(settleTime)
}

// cable takes the first up machines' links (the last storm's) to the first n, so that a storm
// of n is n machines on the bridge; it changes only the links between the two. The bridge floods every broadcast (DHCP, ARP) to every port that
// is up, on the two cores the servers and clients share, where a lab's switch does it in
// hardware: with 200 idle ports an N = 10 storm's DHCP took about twice as long, for both
// servers.
func cable(ctx context.Context, clients []*client, up, n int) error {
	state, change := "up", clients[min(up, n):n]
	if n < up {
		state, change = "down", clients[n:up]
	}
	for _, c := range change {
		if out, err := exec.CommandContext(ctx, "ip", "-n", c.ns.Name, "link", "set", "eth0", state).CombinedOutput(); err != nil {
			return fmt.Errorf("link eth0 %s in %s: %w: %s", state, c.ns.Name, err, out)
		}
	}
	return nil
}

// resetClients clears what the last storm left: addresses on the machines, neighbour entries
// on the bridge side.
func resetClients(ctx context.Context, lab *vlab.Lab, clients []*client) error {
	for _, c := range clients {
		if out, err := exec.CommandContext(ctx, "ip", "-n", c.ns.Name, "addr", "flush", "dev", "eth0").CombinedOutput(); err != nil {
			return fmt.Errorf("flush %s: %w: %s", c.ns.Name, err, out)
		}
	}
	if out, err := lab.Command(ctx, "ip", "neigh", "flush", "all").CombinedOutput(); err != nil {
		return fmt.Errorf("flush neighbours: %w: %s", err, out)
	}
	return nil
}

// describeMachine is the CPU, core count, memory and kernel, for the report.
func describeMachine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0]); len(f) >= 2 {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			mem = fmt.Sprintf(", %.0f GiB RAM", float64(kb)/(1<<20))
		}
	}
	var u syscall.Utsname
	kernel := ""
	if syscall.Uname(&u) == nil {
		b := make([]byte, 0, len(u.Release))
		for _, c := range u.Release {
			if c == 0 {
				break
			}
			b = append(b, byte(c))
		}
		kernel = ", Linux " + string(b)
	}
	return fmt.Sprintf("%s, %d cores%s%s", model, runtime.NumCPU(), mem, kernel)
}

// loadavg is the 1-minute load average, "?" where it cannot be read.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}
