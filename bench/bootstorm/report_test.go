package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/bpf"
)

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 200; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if got := percentile(ds, 50); got != 100*time.Millisecond {
		t.Errorf("p50 = %s, want 100ms", got)
	}
	if got := percentile(ds, 99); got != 198*time.Millisecond {
		t.Errorf("p99 = %s, want 198ms", got)
	}
	if got := percentile(ds[:1], 99); got != time.Millisecond {
		t.Errorf("p99 of one = %s", got)
	}
}

func TestSpanCountsBusyTimeOnly(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var s span
	s.add(at(0), at(100), 1000)
	s.add(at(50), at(150), 1000) // overlaps: busy 0..150
	s.add(at(1000), at(1050), 1000)
	if got := s.busy(); got != 200*time.Millisecond {
		t.Fatalf("busy = %s, want 200ms", got)
	}
	if got := s.rate(); got != 15000 {
		t.Errorf("rate = %v, want 15000 B/s", got)
	}
	// 250 ms of transfers over 200 ms busy.
	if got := s.inFlight(); got != 1.25 {
		t.Errorf("inFlight = %v, want 1.25", got)
	}
	var none span
	if got := none.inFlight(); got != 0 {
		t.Errorf("inFlight of nothing = %v, want 0", got)
	}
}

// dhcpPacket is an IPv4 header (ihl words of 4 bytes), a UDP header to port, and a BOOTP header
// whose chaddr is mac.
func dhcpPacket(ihl int, port uint16, mac net.HardwareAddr) []byte {
	p := make([]byte, ihl*4+8+300)
	p[0] = 0x40 | byte(ihl)
	p[9] = 17
	u := p[ihl*4:]
	u[2], u[3] = byte(port>>8), byte(port)
	copy(u[8+28:], mac)
	return p
}

func TestChaddrFilter(t *testing.T) {
	mine := net.HardwareAddr{0x52, 0x54, 0x00, 0xb5, 0x00, 0x07}
	other := net.HardwareAddr{0x52, 0x54, 0x00, 0xb5, 0x00, 0x08}
	vm, err := bpf.NewVM(chaddrFilter(mine))
	if err != nil {
		t.Fatal(err)
	}
	tcp := dhcpPacket(5, 68, mine)
	tcp[9] = 6
	frag := dhcpPacket(5, 68, mine)
	frag[7] = 1
	for _, tc := range []struct {
		name string
		pkt  []byte
		want bool
	}{
		{"reply to us", dhcpPacket(5, 68, mine), true},
		{"reply to us, IP options", dhcpPacket(6, 68, mine), true},
		{"reply to another client", dhcpPacket(5, 68, other), false},
		{"another client's discover", dhcpPacket(5, 67, other), false},
		{"tcp", tcp, false},
		{"fragment", frag, false},
	} {
		n, err := vm.Run(tc.pkt)
		if err != nil {
			t.Fatal(err)
		}
		if (n > 0) != tc.want {
			t.Errorf("%s: accepted %d bytes, want accept=%v", tc.name, n, tc.want)
		}
	}
}

// The report holds each figure with a target to it, and only those: a machine's wait for its
// boot file is a target, one machine's TFTP rate is shown without one.
func TestTargets(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Each machine: DHCP done at dhcpMS, TFTP of 72 KiB from then until tftpEndMS, HTTP after.
	machines := func(dhcpMS, tftpEndMS int) []clientResult {
		var cs []clientResult
		for range 2 {
			cs = append(cs, clientResult{Start: t0, DHCP: time.Duration(dhcpMS) * time.Millisecond,
				LeasedIP: netip.MustParseAddr("10.80.0.10"), TFTPStart: at(dhcpMS), TFTPEnd: at(tftpEndMS),
				TFTPBytes: 72 << 10, HTTPStart: at(tftpEndMS), HTTPEnd: at(tftpEndMS + 100), HTTPBytes: 1 << 20,
				End: at(tftpEndMS + 100)})
		}
		return cs
	}
	res := results{machine: "test"}
	// bootd: DHCP as fast, TFTP per machine twice as slow, so its boot file comes later.
	res.add(round{n: 2, clients: machines(10, 50), wall: time.Second}, sideBootd)
	res.add(round{n: 2, clients: machines(10, 30), wall: time.Second}, sideBaseline)
	md := res.markdown()
	for _, tc := range []struct {
		row    string
		missed bool
	}{
		{"DISCOVER → boot file received, p50", true},
		{"TFTP throughput (one machine's transfer, median)", false},
		{"DHCP latency p50 (DISCOVER → ACK)", false},
	} {
		t.Run(tc.row, func(t *testing.T) {
			if missed := strings.Contains(md, "- missed: N=2 "+tc.row+":"); missed != tc.missed {
				t.Errorf("listed as missed: %v, want %v\n%s", missed, tc.missed, md)
			}
		})
	}
}

// never is a wall for storms: the storm never ran (the run stopped before it). A wall of 0 is a
// storm that ran and measured nothing.
const never = -1

// storms is a run at N = 2 with a pair for each element of walls: the walls, in seconds, of
// bootd's storm, the baseline's and, given a third, the control's. A pair's storms run in the
// order turn gives them, as in a run.
func storms(walls ...[]float64) results {
	res := results{machine: "test"}
	for pair, w := range walls {
		for _, s := range turn([]side{sideBootd, sideBaseline, sideControl}[:len(w)], pair) {
			if w[s] != never {
				res.add(round{n: 2, wall: time.Duration(w[s] * float64(time.Second)), load: "0.50"}, s)
			}
		}
	}
	return res
}

// rowOf is the report's table line for figure name (the first, for one N).
func rowOf(md, name string) string {
	i := strings.Index(md, "| "+name+" |")
	if i < 0 {
		return ""
	}
	line := md[i:]
	return line[:strings.IndexByte(line, '\n')]
}

// With several storms per server, a figure is judged on the median of the pairs' ratios, each
// storm set against its own partner: one bad pair out of three does not miss a target, two do, a
// pair in which one side measured nothing does. The report shows the median's interval (with
// three pairs, their range), and a miss whose interval reaches the target is one within noise.
func TestMedianOfPairs(t *testing.T) {
	for _, tc := range []struct {
		name            string
		walls           [][]float64 // bootd, baseline
		missed          string      // what the list of misses says, "" for met
		ratio, interval string
	}{
		{"one slow pair of three", [][]float64{{1.0, 1.1}, {2.0, 2.2}, {3.0, 1.5}}, "", "| 0.91 |", "| 0.91–2.00 |"},
		{"two slow pairs of three", [][]float64{{1.0, 1.1}, {2.0, 1.0}, {3.3, 1.5}}, "missed within noise: N=2 time until all N are done: ratio 2.00 (median of 3 pairs, interval 0.91–2.20 at 75%)", "| 2.00 |", "| 0.91–2.20 |"},
		{"three slow pairs of three", [][]float64{{1.2, 1.0}, {1.3, 1.0}, {1.1, 1.0}}, "missed: N=2 time until all N are done: ratio 1.20 (median of 3 pairs, interval 1.10–1.30 at 75%)", "| 1.20 |", "| 1.10–1.30 |"},
		{"two pairs: the mean of both", [][]float64{{1.0, 1.1}, {1.32, 1.1}}, "missed within noise: N=2 time until all N are done: ratio 1.05 (median of 2 pairs, interval 0.91–1.20 at 50%)", "| 1.05 |", "| 0.91–1.20 |"},
		{"judged as shown: 1.004 is 1.00", [][]float64{{1.004, 1.0}}, "", "| 1.00 |", ""},
		{"judged as shown: 1.006 is 1.01", [][]float64{{1.006, 1.0}}, "missed: N=2 time until all N are done: ratio 1.01", "| 1.01 |", ""},
		{"an interval's end judged as shown", [][]float64{{1.004, 1.0}, {1.2, 1.0}, {1.1, 1.0}}, "missed within noise: N=2 time until all N are done: ratio 1.10 (median of 3 pairs, interval 1.00–1.20 at 75%)", "| 1.10 |", "| 1.00–1.20 |"},
		{"a pair in which bootd measured nothing", [][]float64{{1.0, 1.1}, {0, 1.1}, {1.0, 1.1}}, "missed: N=2 time until all N are done: ratio 0.91 (median of 2 pairs, interval 0.91–0.91 at 50%); 1 of 3 pairs without a figure on one side", "| 0.91 |", "| 0.91–0.91 |"},
		{"bootd's storms that measured nothing are not its figure", [][]float64{{0, 1.1}, {0, 1.1}, {1.0, 1.1}}, "missed: N=2 time until all N are done: ratio 0.91 (median of 1 pair, interval 0.91–0.91 at 0%); 2 of 3 pairs without a figure on one side", "| 1.00 s | 1.10 s | 0.91 |", "| 0.91–0.91 |"},
		{"no pair with a figure on both sides", [][]float64{{0, 1.1}, {1.0, 0}, {0, 1.1}}, "missed: N=2 time until all N are done: no ratio: a side measured nothing in every pair (3 pairs)", "| 1.00 s | 1.10 s | — |", "| — |"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := storms(tc.walls...).markdown()
			line := rowOf(md, "time until all N are done")
			if !strings.Contains(line, tc.ratio) || !strings.Contains(line, tc.interval) {
				t.Errorf("row %q: want ratio %s and interval %s", line, tc.ratio, tc.interval)
			}
			listed := strings.Contains(md, "N=2 time until all N are done:")
			if listed != (tc.missed != "") {
				t.Errorf("listed as missed: %v, want %v\n%s", listed, tc.missed != "", md)
			}
			if miss := "\n- " + tc.missed + ", target"; listed && !strings.Contains(md, miss) {
				t.Errorf("misses do not say %q\n%s", miss, md)
			}
		})
	}
}

// The interval of the median is the sign test's: the k-th smallest to the k-th largest ratio
// for the largest k that reaches 95% confidence, and up to eight values their range, with what
// confidence it has.
func TestMedianInterval(t *testing.T) {
	upTo := func(n int) []float64 { // n, n−1, …, 1: unsorted on purpose
		var xs []float64
		for i := n; i >= 1; i-- {
			xs = append(xs, float64(i))
		}
		return xs
	}
	for _, tc := range []struct {
		name           string
		xs             []float64
		lo, hi, confid float64
	}{
		{"none", nil, 0, 0, 0},
		{"one", []float64{1.2}, 1.2, 1.2, 0},
		{"five: the range, below 95%", upTo(5), 1, 5, 1 - 2.0/32},
		{"six: the range reaches 95%", upTo(6), 1, 6, 1 - 2.0/64},
		{"eight: still the range", upTo(8), 1, 8, 1 - 2.0/256},
		{"nine: 2nd to 8th", upTo(9), 2, 8, 1 - 2*10.0/512},
		// The confidences below are exact sums of binomial coefficients (Python's math.comb).
		{"thirty: 10th to 21st", upTo(30), 10, 21, 0.9572260547429323},
		{"a hundred: 40th to 61st", upTo(100), 40, 61, 0.9647997997822952},
		{"two thousand: 956th to 1045th", upTo(2000), 956, 1045, 0.9534471795082162},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi := medianInterval(tc.xs)
			_, c := medianRank(len(tc.xs))
			if lo != tc.lo || hi != tc.hi || math.Abs(c-tc.confid) > 1e-9 {
				t.Errorf("medianInterval = %v–%v at %v, want %v–%v at %v", lo, hi, c, tc.lo, tc.hi, tc.confid)
			}
		})
	}
}

// A ratio's target is judged on the median, and a miss on which side of the bound its interval
// lies: for a lower bound (throughput) the interval's upper end decides, for an upper bound its
// lower end; each as shown, and a pair without a figure misses outright.
func TestRatioTargets(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grade func(verdict) outcome
		v     verdict
		want  outcome
	}{
		{"at most: median within", ratioAtMost(1), verdict{ratio: 0.98, lo: 0.9, hi: 1.1}, met},
		{"at most: median over, interval reaches", ratioAtMost(1), verdict{ratio: 1.06, lo: 0.98, hi: 1.1}, missedInNoise},
		{"at most: interval reaches as shown", ratioAtMost(1), verdict{ratio: 1.06, lo: 1.004, hi: 1.1}, missedInNoise},
		{"at most: all of it over", ratioAtMost(1), verdict{ratio: 1.06, lo: 1.02, hi: 1.1}, missed},
		{"at least: median within", ratioAtLeast(0.9), verdict{ratio: 0.94, lo: 0.8, hi: 1.0}, met},
		{"at least: median under, interval reaches", ratioAtLeast(0.9), verdict{ratio: 0.85, lo: 0.8, hi: 0.95}, missedInNoise},
		{"at least: interval reaches as shown", ratioAtLeast(0.9), verdict{ratio: 0.85, lo: 0.8, hi: 0.8951}, missedInNoise},
		{"at least: all of it under", ratioAtLeast(0.9), verdict{ratio: 0.85, lo: 0.8, hi: 0.88}, missed},
		{"a pair without a figure", ratioAtMost(1), verdict{ratio: 0.9, lo: 0.8, hi: 1.0, dropped: 1}, missed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.grade(tc.v); got != tc.want {
				t.Errorf("outcome %d, want %d", got, tc.want)
			}
		})
	}
}

// The text above a table says which interval it shows: from nine pairs the sign test's ranks,
// up to eight the range, with the confidence each has.
func TestIntervalOf(t *testing.T) {
	for n, want := range map[int]string{
		30:  "with 96% confidence: the 10th smallest to the 10th largest ratio",
		150: "with 96% confidence: the 63rd smallest to the 63rd largest ratio",
		6:   "the range of the ratios, which holds the true median with 97% confidence",
		5:   "the range of the ratios, which holds the true median with 94% confidence",
	} {
		if got := intervalOf(n); !strings.Contains(got, want) {
			t.Errorf("intervalOf(%d) = %q, want it to hold %q", n, got, want)
		}
	}
}

// The list of targets opens with what the run came to: every target met, none missed beyond
// noise, or (a miss the run resolves, a failed machine) straight to the misses.
func TestHeadline(t *testing.T) {
	inNoise, resolved := miss{inNoise: true, text: "a"}, miss{text: "b"}
	for _, tc := range []struct {
		name   string
		misses []miss
		want   string
	}{
		{"none", nil, "Every target met in this run.\n"},
		{"within noise only", []miss{inNoise, inNoise}, "No target missed beyond this run's noise.\n\n"},
		{"one resolved", []miss{inNoise, resolved}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := headline(tc.misses); got != tc.want {
				t.Errorf("headline = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestOrdinal(t *testing.T) {
	for k, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 10: "10th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 40: "40th", 112: "112th"} {
		if got := ordinal(k); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", k, got, want)
		}
	}
}

// A ratio is judged as printed: rounding it any other way can put it on the other side of a bound
// from the figure the reader sees (0.995 prints 0.99).
func TestShown(t *testing.T) {
	for _, tc := range []struct{ ratio, want float64 }{{0.995, 0.99}, {1.004, 1.00}, {1.006, 1.01}, {1.045, 1.04}} {
		if got := shown(tc.ratio); got != tc.want {
			t.Errorf("shown(%v) = %v, want %v", tc.ratio, got, tc.want)
		}
	}
}

// Peak RSS is the largest of the storms, held to its limit at the largest N only; a storm whose
// partner never ran (the run stopped) is left out, and the report says so.
func TestPeakRSSAndIncompletePairs(t *testing.T) {
	// A storm at N of bootd's (bd) or the baseline's (bl), with its peak RSS in MiB.
	type storm struct {
		side   side
		n, rss int64
	}
	bd := func(n, rss int64) storm { return storm{sideBootd, n, rss} }
	bl := func(n, rss int64) storm { return storm{sideBaseline, n, rss} }
	ct := func(n, rss int64) storm { return storm{sideControl, n, rss} }
	for _, tc := range []struct {
		name   string
		storms []storm  // in the order they ran
		rows   []string // table lines the report must hold
		missed string   // the RSS miss, "" for none
	}{
		{"within the limit at the largest N, over it at a smaller one", []storm{
			bd(2, 40), bl(2, 20),
			bl(2, 20), bd(2, 120),
			bd(4, 50), bl(4, 20),
			bd(4, 150), // no partner: left out
		}, []string{
			"| server peak RSS (VmHWM) | 120.0 MiB | 20.0 MiB | 6.00 | — |  | — |",
			"| server peak RSS (VmHWM) | 50.0 MiB | 20.0 MiB | 2.50 | bootd < 100 MiB | yes |",
			"Left out: 1 storms whose partner did not run",
		}, ""},
		{"one storm over the limit at the largest N", []storm{
			bd(4, 50), bl(4, 20),
			bl(4, 20), bd(4, 150),
		}, []string{
			"| server peak RSS (VmHWM) | 150.0 MiB | 20.0 MiB | 7.50 | — | bootd < 100 MiB | **no** |",
		}, "- missed: N=4 server peak RSS (VmHWM): bootd 150.0 MiB at its largest, target bootd < 100 MiB"},
		// A peak row's target is a bound, not a ratio: its miss says nothing of the control.
		{"over the limit, with the control", []storm{
			bd(4, 150), bl(4, 20), ct(4, 20),
		}, []string{
			"| server peak RSS (VmHWM) | 150.0 MiB | 20.0 MiB | 7.50 | 1.00 | bootd < 100 MiB | **no** |",
		}, "- missed: N=4 server peak RSS (VmHWM): bootd 150.0 MiB at its largest, target bootd < 100 MiB\n"},
		// bootd stormed N = 4, and the baseline then failed to start: the report of N = 2 stands.
		{"the run stopped within a size's first pair", []storm{
			bd(2, 40), bl(2, 20),
			bd(4, 50),
		}, []string{
			"| server peak RSS (VmHWM) | 40.0 MiB | 20.0 MiB | 2.00 |  | — |",
			"Left out: 1 storms whose partner did not run",
		}, ""},
		{"the baseline measured nothing: bootd's limit still holds", []storm{
			bd(4, 50), bl(4, 0),
		}, []string{
			"| server peak RSS (VmHWM) | 50.0 MiB | — | — | bootd < 100 MiB | yes |",
			"- missed: N=4 HTTP throughput (all machines, while any transfers): no ratio: a side measured nothing in every pair (1 pair), target",
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := results{machine: "test"}
			for _, s := range tc.storms {
				res.add(round{n: int(s.n), wall: time.Second, hwm: s.rss << 20}, s.side)
			}
			md := res.markdown()
			for _, want := range tc.rows {
				if !strings.Contains(md, want) {
					t.Errorf("report lacks %q\n%s", want, md)
				}
			}
			if got := strings.Contains(md, "server peak RSS (VmHWM): "); got != (tc.missed != "") || !strings.Contains(md, tc.missed) {
				t.Errorf("RSS miss: want %q\n%s", tc.missed, md)
			}
		})
	}
}

// Every table line has as many cells as its header, with one pair (no interval column) and several,
// with and without the control's column.
func TestTableColumns(t *testing.T) {
	for _, tc := range []struct {
		pairCount int
		control   bool
	}{{1, false}, {3, false}, {1, true}, {3, true}} {
		pairCount := tc.pairCount
		t.Run(fmt.Sprintf("%d pairs, control %v", pairCount, tc.control), func(t *testing.T) {
			pair := []float64{1, 1}
			if tc.control {
				pair = append(pair, 1)
			}
			md := storms(slices.Repeat([][]float64{pair}, pairCount)...).markdown()
			cells := -1
			for _, line := range strings.Split(md, "\n") {
				if !strings.HasPrefix(line, "|") {
					continue
				}
				if n := strings.Count(line, "|"); cells < 0 {
					cells = n
				} else if n != cells {
					t.Errorf("%d cell borders, header has %d: %s", n, cells, line)
				}
			}
			want := 7 + min(pairCount-1, 1) // six columns, and the interval with several pairs
			if tc.control {
				want++
			}
			if cells != want {
				t.Errorf("header has %d cell borders, want %d", cells, want)
			}
		})
	}
}

// The control is judged against the baseline as bootd is: its column holds the median of its
// pairs' ratios and its interval, a miss of bootd's says what the control measured on that row,
// and a run stopped before a pair's control ran leaves that pair out.
func TestControl(t *testing.T) {
	for _, tc := range []struct {
		name    string
		walls   [][]float64 // bootd, baseline, control
		row     string      // the wall row, from bootd / baseline on
		missed  string      // the miss's text, "" for met
		leftOut int         // storms without all their partners
	}{
		{"bootd within the control's interval", [][]float64{{1.05, 1.0, 1.1}, {1.0, 1.0, 0.9}, {1.1, 1.0, 1.0}},
			"| 1.05 | 1.00–1.10 | 1.00 (0.90–1.10) | ≤ 1.00 (no slower) | **no**, within noise |",
			"missed within noise: N=2 time until all N are done: ratio 1.05 (median of 3 pairs, interval 1.00–1.10 at 75%), target ≤ 1.00 (no slower); the baseline against itself: 1.00 (0.90–1.10)", 0},
		{"bootd faster", [][]float64{{0.5, 1.0, 1.2}, {0.5, 1.0, 1.0}, {0.5, 1.0, 0.8}},
			"| 0.50 | 0.50–0.50 | 1.00 (0.80–1.20) | ≤ 1.00 (no slower) | yes |", "", 0},
		// The second pair runs baseline, control, bootd: stopped after its baseline.
		{"the run stopped in the second pair", [][]float64{{0.5, 1.0, 1.2}, {never, 1.0, never}},
			"| 0.50 | 1.20 | ≤ 1.00 (no slower) | yes |", "", 1},
		// The fourth pair runs bootd, baseline, control: stopped after its baseline, so the control
		// alone bounds the pairs, and bootd's 2.0 is left out with the baseline's storm beside it.
		{"the run stopped before the fourth pair's control", [][]float64{{0.5, 1.0, 1.2}, {0.5, 1.0, 1.0}, {0.5, 1.0, 0.8}, {2.0, 1.0, never}},
			"| 0.50 | 0.50–0.50 | 1.00 (0.80–1.20) | ≤ 1.00 (no slower) | yes |", "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := storms(tc.walls...).markdown()
			if line := rowOf(md, "time until all N are done"); !strings.Contains(line, tc.row) {
				t.Errorf("row %q, want it to hold %q", line, tc.row)
			}
			listed := strings.Contains(md, "N=2 time until all N are done:")
			if miss := "\n- " + tc.missed; listed != (tc.missed != "") || listed && !strings.Contains(md, miss) {
				t.Errorf("misses: want %q\n%s", tc.missed, md)
			}
			if left := fmt.Sprintf("Left out: %d storms", tc.leftOut); strings.Contains(md, left) != (tc.leftOut > 0) {
				t.Errorf("want %q: %v\n%s", left, tc.leftOut > 0, md)
			}
		})
	}
}

// Machines that failed in the control's storms alone are the control's, in the report and in
// the misses.
func TestControlFailures(t *testing.T) {
	res := storms([]float64{1, 1, never})
	res.add(round{n: 2, wall: time.Second, load: "0.50", clients: []clientResult{{Err: errors.New("no offer")}, {Err: errors.New("no ack")}}}, sideControl)
	md := res.markdown()
	for _, want := range []string{
		"\nFailed machines, over all storms: bootd 0, baseline 0, control 2. First error: no offer.\n",
		"\n- missed: N=2: failed machines (bootd 0, baseline 0, control 2)\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q\n%s", want, md)
		}
	}
}

func TestServersTakeTurns(t *testing.T) {
	a, b, c := contender{&bootdServer{}, sideBootd}, contender{&baselineServer{}, sideBaseline}, contender{&baselineServer{again: true}, sideControl}
	servers := []contender{a, b, c}
	for pair, want := range [][]contender{{a, b, c}, {b, c, a}, {c, a, b}, {a, b, c}} {
		if got := turn(servers, pair); !slices.Equal(got, want) {
			t.Errorf("pair %d: order %v; want %v", pair, names(got), names(want))
		}
	}
	for pair, want := range [][]contender{{a, b}, {b, a}, {a, b}} { // without the control
		if got := turn(servers[:2], pair); !slices.Equal(got, want) {
			t.Errorf("pair %d of two: order %v; want %v", pair, names(got), names(want))
		}
	}
	if servers[0] != a {
		t.Error("turn reordered its argument")
	}
}

func names(cs []contender) []string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Name())
	}
	return n
}

func TestParseSizes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []int
		wantErr string
	}{
		{"10,50,200", []int{10, 50, 200}, ""},
		{"10, 50", []int{10, 50}, ""},
		{"10,10", nil, "--n: 10 twice: to storm a size more often, use --repeat"},
		{"0", nil, "want sizes from 1 to 240"},
		{"241", nil, "want sizes from 1 to 240"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSizes(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("%v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestPairs(t *testing.T) {
	for _, tc := range []struct {
		repeat, n, want int
	}{
		{0, 10, 30}, // 300 machines' boots
		{0, 50, 6},
		{0, 200, 5},
		{0, 7, 30},  // at most 30
		{0, 240, 5}, // at least 5
		{3, 10, 3},  // --repeat decides
		{3, 200, 3},
	} {
		t.Run(fmt.Sprintf("repeat %d N %d", tc.repeat, tc.n), func(t *testing.T) {
			if got := (options{repeat: tc.repeat}).pairs(tc.n); got != tc.want {
				t.Errorf("%d pairs, want %d", got, tc.want)
			}
		})
	}
}
