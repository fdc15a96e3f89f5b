package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// round is one storm: N machines against one server.
type round struct {
	n       int
	clients []clientResult
	t0      time.Time
	wall    time.Duration // barrier released .. last machine done
	cpu     time.Duration // server CPU (user + system) during the storm
	hwm     int64         // server peak RSS, summed over its processes
	procs   int
	load    string // the 1-minute load average as the storm began: other work on the machine skews figures
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

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
func mib(b int64) float64       { return float64(b) / (1 << 20) }

// results is the whole run.
type results struct {
	machine string
	rootfs  int64
	spec    clientSpec
	ns      []int          // the storms' sizes, in the order they ran
	byN     map[int]*pairs // each size's storms
}

// side is which part of the comparison a storm is: bootd's, the baseline's, or the control's (the
// baseline again, compared with the baseline as bootd is).
type side int

const (
	sideBootd side = iota
	sideBaseline
	sideControl
	sideScraped // bootd again, its /metrics scraped by a Prometheus every second
	sides       // how many there are
)

func (s side) String() string {
	return [sides]string{"bootd", "baseline", "control", "bootd scraped"}[s]
}

// add files storm r under its side.
func (res *results) add(r round, s side) {
	if res.byN == nil {
		res.byN = map[int]*pairs{}
	}
	p := res.byN[r.n]
	if p == nil {
		p = &pairs{}
		res.byN[r.n] = p
		res.ns = append(res.ns, r.n)
	}
	p[s] = append(p[s], r)
}

// rssLimit is the target for bootd's peak RSS at the largest storm.
const rssLimit = 100 << 20

// row is one figure of the report: how to read it off a storm and show it, and its target and how
// a verdict fares against it.
type row struct {
	name   string
	value  func(figures) float64
	show   func(float64) string
	peak   bool // the largest of the storms, not their median (peak RSS)
	target string
	grade  func(verdict) outcome // nil: the figure has no target
}

// outcome is how a figure fared against its target.
type outcome int

const (
	noTarget outcome = iota
	met
	// missedInNoise: the median of the pairs' ratios misses, but the interval that holds the
	// true median with the run's confidence reaches the target, so the run cannot tell the
	// miss from noise. More pairs narrow the interval (--repeat).
	missedInNoise
	missed
)

// ratioAtMost and ratioAtLeast hold the ratio bootd / baseline, as the report shows it (two
// decimals), to a bound; a pair without a figure on one side misses it. Judged as shown: a ratio
// of 1.004 would otherwise read "1.00, missed", for a difference a run cannot tell from noise.
func ratioAtMost(bound float64) func(verdict) outcome {
	return ratioWithin(func(ratio float64) bool { return ratio <= bound })
}

func ratioAtLeast(bound float64) func(verdict) outcome {
	return ratioWithin(func(ratio float64) bool { return ratio >= bound })
}

// ratioWithin judges the median of the pairs' ratios, and a miss by whether either end of its
// interval meets the target.
func ratioWithin(ok func(ratio float64) bool) func(verdict) outcome {
	return func(v verdict) outcome {
		switch {
		case v.dropped > 0 || !v.hasRatio():
			return missed
		case ok(shown(v.ratio)):
			return met
		case ok(shown(v.lo)) || ok(shown(v.hi)):
			return missedInNoise
		}
		return missed
	}
}

// shown is a ratio as the report prints it: the same formatting, so that rounding cannot differ
// (0.995 prints 0.99, where math.Round would make it 1.00).
func shown(ratio float64) float64 {
	v, _ := strconv.ParseFloat(fmt.Sprintf("%.2f", ratio), 64)
	return v
}

// rows are the report's figures; at the run's largest N, bootd's peak RSS is held to rssLimit.
func rows(atLargestN bool) []row {
	dur := func(get func(figures) time.Duration) func(figures) float64 {
		return func(f figures) float64 { return float64(get(f)) }
	}
	showMS := func(v float64) string { return ms(time.Duration(v)) }
	showS := func(v float64) string { return fmt.Sprintf("%.2f s", time.Duration(v).Seconds()) }
	showMBs := func(v float64) string { return fmt.Sprintf("%.1f MB/s", v/1e6) }
	const noSlower = "≤ 1.00 (no slower)"
	atMost1, atLeast1 := ratioAtMost(1), ratioAtLeast(1)
	rss := row{name: "server peak RSS (VmHWM)", value: func(f figures) float64 { return float64(f.RSS) },
		show: func(v float64) string { return fmt.Sprintf("%.1f MiB", mib(int64(v))) }, peak: true}
	if atLargestN {
		rss.target, rss.grade = "bootd < 100 MiB", func(v verdict) outcome {
			if v.subject > 0 && v.subject < rssLimit {
				return met
			}
			return missed
		}
	}
	return []row{
		{name: "time until all N are done", value: dur(func(f figures) time.Duration { return f.Wall }), show: showS, target: noSlower, grade: atMost1},
		{name: "DHCP latency p50 (DISCOVER → ACK)", value: dur(func(f figures) time.Duration { return f.DHCP50 }), show: showMS, target: noSlower, grade: atMost1},
		{name: "DHCP latency p99", value: dur(func(f figures) time.Duration { return f.DHCP99 }), show: showMS, target: noSlower, grade: atMost1},
		{name: "of which DISCOVER → OFFER, p50", value: dur(func(f figures) time.Duration { return f.Offer50 }), show: showMS},
		{name: "TFTP throughput (all machines, while any transfers)", value: func(f figures) float64 { return f.TFTPRate }, show: showMBs, target: "≥ 1.00 (no slower)", grade: atLeast1},
		// One machine's transfer rate carries no target: it falls as more transfers share the
		// server, and how many do is set by how fast DHCP lets the machines through (the next
		// row). A machine's wait for its boot file, DHCP and TFTP together, carries it instead.
		{name: "TFTP throughput (one machine's transfer, median)", value: func(f figures) float64 { return f.TFTPEach }, show: showMBs},
		{name: "of which TFTP transfers at once (mean)", value: func(f figures) float64 { return f.TFTPInFlight }, show: func(v float64) string { return fmt.Sprintf("%.1f", v) }},
		{name: "DISCOVER → boot file received, p50", value: dur(func(f figures) time.Duration { return f.BootFile50 }), show: showMS, target: noSlower, grade: atMost1},
		{name: "HTTP throughput (all machines, while any transfers)", value: func(f figures) float64 { return f.HTTPRate }, show: showMBs, target: "≥ 0.90 (within 10% of nginx)", grade: ratioAtLeast(0.9)},
		{name: "server CPU time (user + system)", value: dur(func(f figures) time.Duration { return f.CPU }), show: showS},
		rss,
	}
}

// verdict is one row of one N's table, for one side against the baseline: bootd's, or the
// control's.
type verdict struct {
	subject, baseline float64   // the median of each side's storms that measured it (peak rows: the largest)
	ratio             float64   // the median of the pairs' ratios, subject / baseline (peak rows: of the largest storms)
	ratios            []float64 // the pairs' ratios that have a figure on both sides (peak rows: none)
	lo, hi            float64   // the interval of their median (medianInterval)
	dropped           int       // comparisons without one: a side measured nothing (its machines failed)
	outcome           outcome   // against the row's target
}

// judge reads row r off each pair of storms, the subject's (bootd's or the control's) against
// the baseline's. A storm that measured nothing (0: all its machines failed that phase) is left
// out of its side's median, and its pair has no ratio. A peak row compares each side's largest
// storm instead.
func judge(r row, subject, baseline []figures) verdict {
	var v verdict
	vs, vl := make([]float64, len(subject)), make([]float64, len(subject))
	for i := range subject {
		vs[i], vl[i] = r.value(subject[i]), r.value(baseline[i])
	}
	if r.peak {
		v.subject, v.baseline = slices.Max(vs), slices.Max(vl)
		v.ratio, v.dropped = ratioOf(v.subject, v.baseline)
	} else {
		for i := range vs {
			if rt, none := ratioOf(vs[i], vl[i]); none == 0 {
				v.ratios = append(v.ratios, rt)
			} else {
				v.dropped++
			}
		}
		v.subject, v.baseline, v.ratio = median(measured(vs)), median(measured(vl)), median(v.ratios)
		v.lo, v.hi = medianInterval(v.ratios)
	}
	if r.grade != nil {
		v.outcome = r.grade(v)
	}
	return v
}

// hasRatio says whether some comparison had a figure on both sides: a ratio is one of measured
// figures, so it is above 0, and 0 stands for none.
func (v verdict) hasRatio() bool { return v.ratio > 0 }

// ratioOf is a / b, or none = 1 when either side measured nothing.
func ratioOf(a, b float64) (ratio float64, none int) {
	if a > 0 && b > 0 {
		return a / b, 0
	}
	return 0, 1
}

// pairs are one N's storms, each side's in the order they ran: the i-th of each ran side by side
// (pair i). The control's storms, when the run has them, are the baseline's again.
type pairs [sides][]round

// complete keeps the pairs whose storms all ran: a run that stops early reports what it finished,
// and how many storms it left out.
func (p pairs) complete() (kept pairs, left int) {
	n := min(len(p[sideBootd]), len(p[sideBaseline]))
	for _, s := range []side{sideControl, sideScraped} {
		if len(p[s]) > 0 { // a run without the control, or without scraping, has none
			n = min(n, len(p[s]))
		}
	}
	for s, rs := range p {
		kept[s] = rs[:min(n, len(rs))]
		left += len(rs) - len(kept[s])
	}
	return kept, left
}

// measured is the values above 0: the storms that measured a figure.
func measured(vs []float64) []float64 {
	return slices.DeleteFunc(slices.Clone(vs), func(v float64) bool { return v <= 0 })
}

// medianInterval is a confidence interval for the median of the distribution that xs are drawn
// from, assuming nothing of its shape (the sign test's): the k-th smallest to the k-th largest
// value, for the largest k that holds the median with at least 95% confidence. Each value falls on
// either side of the median with even odds, so the interval misses it only when fewer than k fall
// on one side: confidence = 1 − 2·P(Binomial(n, ½) < k). A pair's ratio sets each storm against
// its partner a moment apart, so the pairs are taken as independent draws. Up to eight values
// the interval is their range (k = 2 reaches 95% only from nine on); with five or fewer even the
// range falls short of 95%, and medianRank says by how much.
func medianInterval(xs []float64) (lo, hi float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := slices.Sorted(slices.Values(xs))
	k, _ := medianRank(len(s))
	return s[k-1], s[len(s)-k]
}

// medianRank is medianInterval's k for n values, and the confidence with which its interval
// holds the true median: 1 − 2·P(B < k), P(B < k) summed up as k grows.
func medianRank(n int) (k int, confidence float64) {
	if n == 0 {
		return 0, 0
	}
	below := binomialPMF(n, 0) // P(B < k), k = 1
	k, confidence = 1, 1-2*below
	for k < n/2 {
		below += binomialPMF(n, k) // P(B < k+1)
		if 1-2*below < 0.95 {
			break
		}
		k, confidence = k+1, 1-2*below
	}
	return k, confidence
}

// binomialPMF is P(Binomial(n, ½) = i), from logarithms so that no factor under- or overflows.
func binomialPMF(n, i int) float64 {
	lgamma := func(x int) float64 { v, _ := math.Lgamma(float64(x)); return v }
	return math.Exp(lgamma(n+1) - lgamma(i+1) - lgamma(n-i+1) - float64(n)*math.Ln2)
}

// median is the middle value (the mean of the two middle ones for an even count; 0 for none).
func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}

// markdown renders one table per N: each figure for bootd and the baseline (the median of their
// storms), the median of the pairs' ratios with its interval, and the target it is held to.
// Targets are reported, never asserted: the machines are shared and noisy.
func (res results) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Machine: %s.\n\n", res.machine)
	var files []string
	for _, f := range res.spec.Files {
		files = append(files, fmt.Sprintf("`%s` %.1f MiB", f.Path[strings.LastIndexByte(f.Path, '/')+1:], mib(f.Size)))
	}
	fmt.Fprintf(&b, "Each machine: DHCP (BIOS PXE), TFTP `%s` (%.1f KiB, blksize %d), HTTP %s.\n",
		res.spec.WantBoot, float64(res.spec.BootSize)/1024, tftpBlockSize, strings.Join(files, ", "))
	var misses []miss
	unpaired := 0
	for _, n := range res.ns {
		p, left := res.byN[n].complete()
		unpaired += left
		if len(p[sideBootd]) == 0 {
			continue // the run stopped before a size's first pair was complete: no table to draw
		}
		misses = append(misses, p.table(&b, n, n == slices.Max(res.ns))...) // RSS is held to its limit at the largest N
	}
	if unpaired > 0 {
		fmt.Fprintf(&b, "\nLeft out: %d storms whose partner did not run (the run stopped early).\n", unpaired)
	}
	b.WriteString("\n### Targets\n\n" + headline(misses))
	for _, m := range misses {
		fmt.Fprintf(&b, "- %s: %s\n", m.kind(), m.text)
	}
	return b.String()
}

// headline opens the list of targets with what the run came to, when the list alone does not say.
func headline(misses []miss) string {
	switch {
	case len(misses) == 0:
		return "Every target met in this run.\n"
	case !slices.ContainsFunc(misses, func(m miss) bool { return !m.inNoise }):
		return "No target missed beyond this run's noise.\n\n"
	}
	return ""
}

// table writes N = n's table to b and returns the targets it missed.
func (p pairs) table(b *strings.Builder, n int, atLargestN bool) (misses []miss) {
	pairCount := len(p[sideBootd])
	fmt.Fprintf(b, "\n### N = %d\n\n", n)
	if pairCount > 1 {
		fmt.Fprintf(b, "%d storms per server, the servers taking turns going first. bootd and baseline: the median of their storms; bootd / baseline: the median of the %d pairs' ratios (peak RSS: the largest storms and their ratio), and %s. A median that misses its target while its interval reaches it is a miss within this run's noise.\n\n", pairCount, pairCount, intervalOf(pairCount))
	}
	hasControl := len(p[sideControl]) > 0
	var load []string
	var f [sides][]figures
	for s, rs := range p {
		if len(rs) > 0 {
			load = append(load, side(s).String()+" "+loads(rs))
		}
		f[s] = figuresOf(rs)
	}
	fmt.Fprintf(b, "Load average (1 min) before each storm: %s.\n\n", strings.Join(load, "; "))
	if hasControl {
		b.WriteString("Control / baseline: the baseline stormed once more in each pair (the servers taking turns in each place of a pair), and set against the baseline's storm as bootd's is: what the ratio is when both sides are the same server.\n\n")
	}
	hasScraped := len(p[sideScraped]) > 0
	if hasScraped {
		b.WriteString("Scraped / bootd: bootd stormed once more in each pair while a Prometheus (Debian's) scraped its /metrics every second, set against bootd's unscraped storm: what serving its metrics costs.\n\n")
	}
	intervalHead, intervalRule, controlHead, controlRule := "", "", "", ""
	if pairCount > 1 {
		intervalHead, intervalRule = " interval |", " ---: |"
	}
	if hasControl {
		controlHead, controlRule = " control / baseline |", " ---: |"
	}
	if hasScraped {
		controlHead, controlRule = controlHead+" scraped / bootd |", controlRule+" ---: |"
	}
	fmt.Fprintf(b, "| figure | bootd | dnsmasq + nginx | bootd / baseline |%s%s target | met |\n", intervalHead, controlHead)
	fmt.Fprintf(b, "| --- | ---: | ---: | ---: |%s%s --- | --- |\n", intervalRule, controlRule)
	for _, r := range rows(atLargestN) {
		v := judge(r, f[sideBootd], f[sideBaseline])
		intervalCell, controlCell := "", ""
		if pairCount > 1 {
			intervalCell = " " + interval(v) + " |" // "—" for a peak row: one comparison, of the largest
		}
		var vc verdict
		if hasControl {
			vc = judge(r, f[sideControl], f[sideBaseline])
			controlCell = " " + controlOf(vc, pairCount) + " |"
		}
		if hasScraped {
			controlCell += " " + controlOf(judge(r, f[sideScraped], f[sideBootd]), pairCount) + " |"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |%s%s %s | %s |\n", r.name, figureCell(r, v.subject), figureCell(r, v.baseline), ratioCell(v), intervalCell, controlCell, r.target, metCell(v))
		if v.outcome == missed || v.outcome == missedInNoise {
			m := miss{inNoise: v.outcome == missedInNoise, text: fmt.Sprintf("N=%d %s: %s, target %s", n, r.name, missDetail(r, v, pairCount), r.target)}
			if hasControl && !r.peak && vc.hasRatio() {
				m.text += "; the baseline against itself: " + controlOf(vc, pairCount)
			}
			misses = append(misses, m)
		}
	}
	if total, each, firstErrs := failures(f); total > 0 {
		fmt.Fprintf(b, "\nFailed machines, over all storms: %s.%s\n", each, firstErrs)
		misses = append(misses, miss{text: fmt.Sprintf("N=%d: failed machines (%s)", n, each)})
	}
	return misses
}

// controlOf is the control's ratio to the baseline and, with several pairs, its interval.
func controlOf(vc verdict, pairCount int) string {
	if pairCount > 1 && len(vc.ratios) > 0 {
		return ratioCell(vc) + " (" + interval(vc) + ")"
	}
	return ratioCell(vc)
}

// intervalOf says what the interval of n pairs' ratios is, for the text above a table.
func intervalOf(n int) string {
	k, confidence := medianRank(n)
	if k == 1 {
		return fmt.Sprintf("the range of the ratios, which holds the true median with %.0f%% confidence (with %d pairs no narrower interval reaches 95%%)", 100*confidence, n)
	}
	return fmt.Sprintf("the interval that holds the true median with %.0f%% confidence: the %s smallest to the %s largest ratio (a sign test's, which assumes nothing of how the ratios spread)", 100*confidence, ordinal(k), ordinal(k))
}

// ordinal is 1st, 2nd, 3rd, 4th, …, 11th, 12th, 13th, 21st.
func ordinal(k int) string {
	suffix := "th"
	if k%100/10 != 1 {
		switch k % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.Itoa(k) + suffix
}

// pairsOf is "1 pair" or "n pairs".
func pairsOf(n int) string {
	if n == 1 {
		return "1 pair"
	}
	return fmt.Sprintf("%d pairs", n)
}

// figureCell is a server's figure, "—" when none of its storms measured it.
func figureCell(r row, x float64) string {
	if x == 0 {
		return "—"
	}
	return r.show(x)
}

// ratioCell is a row's ratio, "—" when there is none.
func ratioCell(v verdict) string {
	if !v.hasRatio() {
		return "—"
	}
	return fmt.Sprintf("%.2f", v.ratio)
}

// interval is a row's interval of the median ratio, "—" when no pair has a ratio.
func interval(v verdict) string {
	if len(v.ratios) == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f–%.2f", v.lo, v.hi)
}

func metCell(v verdict) string {
	return [...]string{noTarget: "—", met: "yes", missedInNoise: "**no**, within noise", missed: "**no**"}[v.outcome]
}

// miss is a target a run missed, as the list of targets says it.
type miss struct {
	inNoise bool // within the run's noise: the interval of the median reaches the target
	text    string
}

func (m miss) kind() string {
	if m.inNoise {
		return "missed within noise"
	}
	return "missed"
}

// missDetail says what a missed target measured, for the list of misses.
func missDetail(r row, v verdict, pairCount int) string {
	var s string
	switch {
	case r.peak:
		s = "bootd " + r.show(v.subject) + " at its largest"
	case !v.hasRatio():
		return fmt.Sprintf("no ratio: a side measured nothing in every pair (%s)", pairsOf(pairCount))
	case pairCount > 1:
		_, confidence := medianRank(len(v.ratios))
		s = fmt.Sprintf("ratio %.2f (median of %s, interval %s at %.0f%%)", v.ratio, pairsOf(len(v.ratios)), interval(v), 100*confidence)
	default:
		s = fmt.Sprintf("ratio %.2f", v.ratio)
	}
	switch {
	case v.dropped > 0 && r.peak:
		s += "; a side without a figure"
	case v.dropped > 0:
		s += fmt.Sprintf("; %d of %d pairs without a figure on one side", v.dropped, pairCount)
	}
	return s
}

func figuresOf(rs []round) []figures {
	fs := make([]figures, len(rs))
	for i, r := range rs {
		fs[i] = r.figures()
	}
	return fs
}

// loads is the 1-minute load average before each storm: other work on the machine skews figures.
func loads(rs []round) string {
	var l []string
	for _, r := range rs {
		l = append(l, r.load)
	}
	return strings.Join(l, ", ")
}

// failures counts the machines that did not boot, over every storm: in all, for each side that
// stormed ("bootd 0, baseline 2", and the control's when the run has it), and the first error of
// each side that has one (" First error: ….", one after another).
func failures(f [sides][]figures) (total int, each, firstErrs string) {
	var counts []string
	for s, fs := range f {
		if len(fs) == 0 {
			continue
		}
		var n int
		var first error
		for _, x := range fs {
			n += x.Failed
			if first == nil {
				first = x.FirstErr
			}
		}
		total += n
		counts = append(counts, fmt.Sprintf("%s %d", side(s), n))
		if first != nil {
			firstErrs += fmt.Sprintf(" First error: %v.", first)
		}
	}
	return total, strings.Join(counts, ", "), firstErrs
}
