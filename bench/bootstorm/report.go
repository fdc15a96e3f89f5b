package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// round is one storm: N machines against one server.
type round struct {
	server  string
	n       int
	clients []clientResult
	t0      time.Time
	wall    time.Duration // barrier released .. last machine done
	cpu     time.Duration // server CPU (user + system) during the storm
	hwm     int64         // server peak RSS, summed over its processes
	procs   int
	load    string // /proc/loadavg before the storm: other work on the machine skews figures
}

// figures are a round's numbers, as reported.
type figures struct {
	Wall               time.Duration
	DHCP50, DHCP99     time.Duration
	Offer50            time.Duration // DISCOVER .. OFFER, p50
	TFTPEach           float64       // median of the machines' own TFTP rates (size / duration)
	TFTPRate, HTTPRate float64       // bytes per second, aggregate over all machines
	TFTPInFlight       float64       // transfers running at once, on average while any runs
	BootFile50         time.Duration // DISCOVER sent .. boot file received, p50: DHCP and TFTP as one machine sees them
	CPU                time.Duration
	RSS                int64
	Failed             int
	FirstErr           error
}

func (r round) figures() figures {
	f := figures{Wall: r.wall, CPU: r.cpu, RSS: r.hwm}
	var dhcp, offer, tftpEach, bootFile []time.Duration
	var tftp, http span
	for _, c := range r.clients {
		if c.Err != nil {
			f.Failed++
			if f.FirstErr == nil {
				f.FirstErr = c.Err
			}
		}
		if c.LeasedIP.IsValid() {
			dhcp = append(dhcp, c.DHCP)
			offer = append(offer, c.Offer)
		}
		if !c.HTTPStart.IsZero() { // the TFTP transfer succeeded
			tftp.add(c.TFTPStart, c.TFTPEnd, c.TFTPBytes)
			tftpEach = append(tftpEach, c.TFTPEnd.Sub(c.TFTPStart))
			bootFile = append(bootFile, c.TFTPEnd.Sub(c.Start))
		}
		if !c.HTTPEnd.IsZero() {
			http.add(c.HTTPStart, c.HTTPEnd, c.HTTPBytes)
		}
	}
	f.DHCP50, f.DHCP99 = percentile(dhcp, 50), percentile(dhcp, 99)
	f.Offer50 = percentile(offer, 50)
	if d := percentile(tftpEach, 50); d > 0 && len(r.clients) > 0 {
		// Every machine fetches the same file: the median duration gives the median rate.
		f.TFTPEach = float64(r.clients[0].TFTPBytes) / d.Seconds()
	}
	f.TFTPRate, f.HTTPRate = tftp.rate(), http.rate()
	f.TFTPInFlight = tftp.inFlight()
	f.BootFile50 = percentile(bootFile, 50)
	return f
}

// span is the aggregate of one phase over all machines: the bytes moved, divided by the time
// during which at least one machine was in that phase. Gaps when no machine is transferring
// (machines still in DHCP, say) do not count, so a server's DHCP pace does not show up as
// TFTP or HTTP throughput.
type span struct {
	intervals [][2]time.Time
	bytes     int64
}

func (s *span) add(start, end time.Time, n int64) {
	s.intervals = append(s.intervals, [2]time.Time{start, end})
	s.bytes += n
}

// busy is the length of the union of the intervals.
func (s span) busy() time.Duration {
	iv := slices.Clone(s.intervals)
	slices.SortFunc(iv, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	var total time.Duration
	var cur [2]time.Time
	for i, x := range iv {
		switch {
		case i == 0:
			cur = x
		case !x[0].After(cur[1]):
			if x[1].After(cur[1]) {
				cur[1] = x[1]
			}
		default:
			total += cur[1].Sub(cur[0])
			cur = x
		}
	}
	if len(iv) > 0 {
		total += cur[1].Sub(cur[0])
	}
	return total
}

// inFlight is how many intervals overlap on average while any is open.
func (s span) inFlight() float64 {
	d := s.busy()
	if d <= 0 {
		return 0
	}
	var sum time.Duration
	for _, iv := range s.intervals {
		sum += iv[1].Sub(iv[0])
	}
	return float64(sum) / float64(d)
}

func (s span) rate() float64 {
	d := s.busy().Seconds()
	if d <= 0 {
		return 0
	}
	return float64(s.bytes) / d
}

// percentile is the nearest-rank p-th percentile (0 for no samples).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.9999999) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

func (r round) summary() string {
	f := r.figures()
	s := fmt.Sprintf("all done %.2fs, dhcp p50 %s p99 %s (offer p50 %s), tftp %.1f MB/s (median machine %.1f MB/s), http %.0f MB/s, cpu %.2fs, peak rss %.1f MiB (%d procs)",
		f.Wall.Seconds(), ms(f.DHCP50), ms(f.DHCP99), ms(f.Offer50), f.TFTPRate/1e6, f.TFTPEach/1e6, f.HTTPRate/1e6, f.CPU.Seconds(), mib(f.RSS), r.procs)
	if f.Failed > 0 {
		s += fmt.Sprintf(", %d FAILED (first: %v)", f.Failed, f.FirstErr)
	}
	return s
}

// timeline is every client's events in microseconds since the barrier, with the barrier's wall
// clock time, to lay beside a packet capture (tcpdump -tt prints the same clock).
func (r round) timeline() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# barrier %d.%06d; µs since: discover offer ack tftp-start tftp-end http-start end leased mac-index\n", r.t0.Unix(), r.t0.Nanosecond()/1000)
	us := func(t time.Time) int64 {
		if t.IsZero() {
			return -1
		}
		return t.Sub(r.t0).Microseconds()
	}
	for i, c := range r.clients {
		fmt.Fprintf(&b, "%d %d %d %d %d %d %d %s %d\n", us(c.Start), us(c.Start.Add(c.Offer)), us(c.Start.Add(c.DHCP)),
			us(c.TFTPStart), us(c.TFTPEnd), us(c.HTTPStart), us(c.End), c.LeasedIP, i)
	}
	return b.String()
}

func ms(d time.Duration) string  { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
func mib(b int64) float64        { return float64(b) / (1 << 20) }
func ratio(a, b float64) float64 { return a / b }

// results is the whole run.
type results struct {
	machine string
	rootfs  int64
	spec    clientSpec
	rounds  []round
}

// rssLimit is the target for bootd's peak RSS at the largest storm.
const rssLimit = 100 << 20

// markdown renders one table per N: each figure for bootd and the baseline, their ratio, and the
// target it is held to. Targets are reported, never asserted: the machines are shared and noisy.
func (res results) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Machine: %s.\n\n", res.machine)
	var files []string
	for _, f := range res.spec.Files {
		files = append(files, fmt.Sprintf("`%s` %.1f MiB", f.Path[strings.LastIndexByte(f.Path, '/')+1:], mib(f.Size)))
	}
	fmt.Fprintf(&b, "Each machine: DHCP (BIOS PXE), TFTP `%s` (%.1f KiB, blksize %d), HTTP %s.\n",
		res.spec.WantBoot, float64(res.spec.BootSize)/1024, tftpBlockSize, strings.Join(files, ", "))
	byN := map[int]map[string]round{}
	var ns []int
	for _, r := range res.rounds {
		if byN[r.n] == nil {
			byN[r.n] = map[string]round{}
			ns = append(ns, r.n)
		}
		byN[r.n][r.server] = r
	}
	maxN := slices.Max(append(ns, 0))
	var misses []string
	for _, n := range ns {
		bd, okB := byN[n]["bootd"]
		bl, okL := byN[n]["dnsmasq+nginx"]
		if !okB || !okL {
			continue
		}
		fb, fl := bd.figures(), bl.figures()
		fmt.Fprintf(&b, "\n### N = %d\n\n", n)
		fmt.Fprintf(&b, "Load average (1, 5, 15 min) before the storms: bootd %s; baseline %s.\n\n", bd.load, bl.load)
		b.WriteString("| figure | bootd | dnsmasq + nginx | bootd / baseline | target | met |\n")
		b.WriteString("| --- | ---: | ---: | ---: | --- | --- |\n")
		row := func(name, vb, vl string, rt float64, target string, met bool, hasTarget bool) {
			m := "—"
			if hasTarget {
				m = "yes"
				if !met {
					m = "**no**"
					misses = append(misses, fmt.Sprintf("N=%d %s: ratio %.2f, target %s", n, name, rt, target))
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.2f | %s | %s |\n", name, vb, vl, rt, target, m)
		}
		lower := func(name string, a, c time.Duration, unit func(time.Duration) string) {
			r := ratio(float64(a), float64(c))
			row(name, unit(a), unit(c), r, "≤ 1.00 (no slower)", r <= 1, true)
		}
		secs := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
		lower("time until all N are done", fb.Wall, fl.Wall, secs)
		lower("DHCP latency p50 (DISCOVER → ACK)", fb.DHCP50, fl.DHCP50, ms)
		lower("DHCP latency p99", fb.DHCP99, fl.DHCP99, ms)
		ro := ratio(float64(fb.Offer50), float64(fl.Offer50))
		row("of which DISCOVER → OFFER, p50", ms(fb.Offer50), ms(fl.Offer50), ro, "", true, false)
		rt := ratio(fb.TFTPRate, fl.TFTPRate)
		row("TFTP throughput (all machines, while any transfers)", mbs(fb.TFTPRate), mbs(fl.TFTPRate), rt, "≥ 1.00 (no slower)", rt >= 1, true)
		// One machine's transfer rate carries no target: it falls as more transfers share the
		// server, and how many do is set by how fast DHCP lets the machines through (the next
		// row). A machine's wait for its boot file, DHCP and TFTP together, carries it instead.
		re := ratio(fb.TFTPEach, fl.TFTPEach)
		row("TFTP throughput (one machine's transfer, median)", mbs(fb.TFTPEach), mbs(fl.TFTPEach), re, "", true, false)
		rf := ratio(fb.TFTPInFlight, fl.TFTPInFlight)
		row("of which TFTP transfers at once (mean)", fmt.Sprintf("%.1f", fb.TFTPInFlight), fmt.Sprintf("%.1f", fl.TFTPInFlight), rf, "", true, false)
		lower("DISCOVER → boot file received, p50", fb.BootFile50, fl.BootFile50, ms)
		rh := ratio(fb.HTTPRate, fl.HTTPRate)
		row("HTTP throughput (all machines, while any transfers)", mbs(fb.HTTPRate), mbs(fl.HTTPRate), rh, "≥ 0.90 (within 10% of nginx)", rh >= 0.9, true)
		rc := ratio(fb.CPU.Seconds(), fl.CPU.Seconds())
		row("server CPU time (user + system)", secs(fb.CPU), secs(fl.CPU), rc, "", true, false)
		rr := ratio(float64(fb.RSS), float64(fl.RSS))
		if n == maxN {
			row("server peak RSS (VmHWM)", fmt.Sprintf("%.1f MiB", mib(fb.RSS)), fmt.Sprintf("%.1f MiB", mib(fl.RSS)), rr,
				"bootd < 100 MiB", fb.RSS < rssLimit, true)
		} else {
			row("server peak RSS (VmHWM)", fmt.Sprintf("%.1f MiB", mib(fb.RSS)), fmt.Sprintf("%.1f MiB", mib(fl.RSS)), rr, "", true, false)
		}
		if fb.Failed+fl.Failed > 0 {
			fmt.Fprintf(&b, "\nFailed machines: bootd %d, baseline %d.", fb.Failed, fl.Failed)
			for _, f := range []figures{fb, fl} {
				if f.FirstErr != nil {
					fmt.Fprintf(&b, " First error: %v.", f.FirstErr)
				}
			}
			b.WriteString("\n")
			misses = append(misses, fmt.Sprintf("N=%d: failed machines (bootd %d, baseline %d)", n, fb.Failed, fl.Failed))
		}
	}
	b.WriteString("\n### Targets\n\n")
	if len(misses) == 0 {
		b.WriteString("Every target met in this run.\n")
	}
	for _, m := range misses {
		fmt.Fprintf(&b, "- missed: %s\n", m)
	}
	return b.String()
}

func mbs(r float64) string { return fmt.Sprintf("%.1f MB/s", r/1e6) }
