package main

import (
	"fmt"
	"strings"
	"time"
)

type results struct {
	opts   options
	imgs   *images
	storms []stormResult
	update updateResult
	took   time.Duration

	start                 time.Time
	loadBefore, loadAfter string
}

func (r results) markdown() string {
	var b strings.Builder
	o, im := r.opts, r.imgs
	rate := float64(o.rateMbit) * 1e6 / 8
	limit := time.Duration(float64(im.v1.size) / rate * float64(time.Second))
	fmt.Fprintf(&b, "## Root image storm at the link's limit (bench/rootstorm)\n\n")
	fmt.Fprintf(&b, "Run of %s UTC; load average before %s, after %s (the machine is shared).\n\n", r.start.UTC().Format("2006-01-02 15:04"), r.loadBefore, r.loadAfter)
	fmt.Fprintf(&b, "Image: %s squashfs (%d MiB of random files, zstd), %d chunks; every link (bootd's, each node's, both ways) "+
		"shaped by tc (tbf, a 1 s queue) to %d Mbit/s: physical limit (size ÷ rate) **%s**. Run took %s.\n\n",
		mibs(im.v1.size), o.sizeMiB, len(im.v1.idx.Chunks), o.rateMbit, dur(limit), r.took.Round(time.Second))
	fmt.Fprintf(&b, "| N | by chunks, peers: all hold the checked image | ÷ physical limit | bootd sent | single-server HTTP, bootd (extrapolated) | ÷ limit | nginx (extrapolated) | ÷ limit | by chunks ÷ nginx |\n")
	fmt.Fprintf(&b, "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range r.storms {
		bt, nt := s.bootd.extrapolated(s.n, im.v1.size), s.nginx.extrapolated(s.n, im.v1.size)
		fmt.Fprintf(&b, "| %d | %s | **%.2f** | %s (%.2f images) | %s | %.1f | %s | %.1f | %.3f |\n", s.n, dur(s.peers.took),
			ratio(s.peers.took, limit), mibs(s.peers.appliance), float64(s.peers.appliance)/float64(im.v1.size),
			dur(bt), ratio(bt, limit), dur(nt), ratio(nt, limit), ratio(s.peers.took, nt))
	}
	fmt.Fprintf(&b, "\nSingle-server storms ran %d s each; their rates (the server's link): ", o.baselineSecs)
	for i, s := range r.storms {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "N = %d: bootd %.2f MB/s, nginx %.2f MB/s", s.n, s.bootd.rate/1e6, s.nginx.rate/1e6)
	}
	fmt.Fprintf(&b, " (link: %.2f MB/s).\n\n", rate/1e6)
	for _, s := range r.storms {
		fmt.Fprintf(&b, "N = %d by chunks, per node: %s\n\n", s.n, spread(s.peers))
	}
	u := r.update.run
	var perNode, maxNode int64
	for _, st := range u.nodes {
		got := st.FromBootd + st.FromPeers
		perNode += got
		maxNode = max(maxNode, got)
	}
	if len(u.nodes) > 0 {
		perNode /= int64(len(u.nodes))
	}
	fmt.Fprintf(&b, "**Version update** (one layer of %d MiB added): %d nodes holding version 1 move to version 2 (%s); "+
		"chunks of version 2 that version 1 lacks: %s (%.2f%% of the image). Bytes per node (from bootd and peers): mean %s, "+
		"largest %s = **%.2f×** the changed chunks, %.2f%% of the image; bootd sent %s; all held the checked image after %s.\n",
		o.layerMiB, u.n, mibs(im.v2.size), mibs(r.update.changed), 100*float64(r.update.changed)/float64(im.v2.size),
		mibs(perNode), mibs(maxNode), float64(maxNode)/float64(r.update.changed), 100*float64(maxNode)/float64(im.v2.size),
		mibs(u.appliance), dur(u.took))
	return b.String()
}

// spread sums up where the nodes' bytes came from.
func spread(f fetchRun) string {
	var boot, peers, dropped, aside, whole int64
	for _, st := range f.nodes {
		boot += st.FromBootd
		peers += st.FromPeers
		dropped += int64(len(st.PeersDropped))
		aside += int64(st.PeersSetAside)
		if st.Whole {
			whole++
		}
	}
	n := int64(max(1, len(f.nodes)))
	return fmt.Sprintf("from bootd %s, from peers %s on average; peers dropped for lying %d, set aside a while (unreachable) %d times; whole-file fallbacks %d",
		mibs(boot/n), mibs(peers/n), dropped, aside, whole)
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }
func mibs(n int64) string              { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
func dur(d time.Duration) string {
	if d >= 10*time.Minute {
		return fmt.Sprintf("%.1f min", d.Minutes())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}
