package tftpd

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"
)

// The worker counts its transfers itself and sends the counts to bootd as one entry of its JSON
// log (countsField), once a second while they change and once more as it stops: its log lines
// cannot be counted instead, since the lines anyone can cause (refusals, failed transfers) are
// rate-limited and a UEFI ROM's tsize probe logs at debug level only. The counts are the
// worker's word, as its log lines are: bootd takes only the outcomes and file names it knows,
// so a compromised worker can skew the figures but not add series.

// countsField marks the worker's entry that carries its counts; the parent takes it as data, not
// a line to log.
const countsField = "tftp_worker_counts"

// countsEvery is how often a worker sends its counts while they change (a variable for tests).
var countsEvery = time.Second

// Transfer outcomes, the label values of Counts.Transfers.
const (
	OutcomeDone    = "done"        // the whole file sent and acknowledged
	OutcomeFailed  = "failed"      // the client stopped answering, or aborted after data
	OutcomeProbe   = "tsize_probe" // a UEFI ROM asking the size and aborting, as it does before its download
	OutcomeRefused = "refused"     // not an iPXE binary the worker serves
	OutcomeBusy    = "busy"        // dropped or refused past the transfer bounds (slots.go)
)

// Outcomes are every outcome, in the order metrics list them.
var Outcomes = []string{OutcomeDone, OutcomeFailed, OutcomeProbe, OutcomeRefused, OutcomeBusy}

// NoFile is the file of a request that named none of the iPXE binaries.
const NoFile = "none"

// DurationBuckets are the upper bounds (seconds) of the histogram of whole transfers' durations:
// a loader of 70 KB to 1 MB takes milliseconds on a lab switch, seconds in a storm.
var DurationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// Counts are TFTP transfers: from one worker since it started, or (Worker's TransferMeter) from
// every worker since bootd started.
type Counts struct {
	// Transfers counts them by outcome, then by file (one of Allowed, or NoFile).
	Transfers map[string]map[string]uint64 `json:"transfers"`
	// Bytes are the bytes sent by file, in done and failed transfers alike.
	Bytes map[string]uint64 `json:"bytes"`
	// Buckets counts done transfers by duration: Buckets[i] those within DurationBuckets[i] and
	// above the bound before; the last one, those above every bound.
	Buckets []uint64 `json:"buckets"`
	Seconds float64  `json:"seconds"` // the done transfers' durations, summed
}

// Done is the number of transfers that sent their whole file.
func (c Counts) Done() uint64 {
	var n uint64
	for _, v := range c.Transfers[OutcomeDone] {
		n += v
	}
	return n
}

func (c *Counts) add(outcome, file string, bytes int64, took time.Duration) {
	if c.Transfers == nil {
		c.Transfers, c.Bytes = map[string]map[string]uint64{}, map[string]uint64{}
		c.Buckets = make([]uint64, len(DurationBuckets)+1)
	}
	if c.Transfers[outcome] == nil {
		c.Transfers[outcome] = map[string]uint64{}
	}
	c.Transfers[outcome][file]++
	if bytes > 0 {
		c.Bytes[file] += uint64(bytes)
	}
	if outcome == OutcomeDone {
		s := took.Seconds()
		i, _ := slices.BinarySearch(DurationBuckets, s)
		c.Buckets[i]++
		c.Seconds += s
	}
}

// plus is c with d added to it.
func (c Counts) plus(d Counts) Counts {
	out := Counts{Transfers: map[string]map[string]uint64{}, Bytes: map[string]uint64{}, Buckets: make([]uint64, len(DurationBuckets)+1),
		Seconds: c.Seconds + d.Seconds}
	for _, x := range []Counts{c, d} {
		for o, files := range x.Transfers {
			if out.Transfers[o] == nil {
				out.Transfers[o] = map[string]uint64{}
			}
			for f, n := range files {
				out.Transfers[o][f] += n
			}
		}
		for f, n := range x.Bytes {
			out.Bytes[f] += n
		}
		for i, n := range x.Buckets {
			out.Buckets[i] += n
		}
	}
	return out
}

// check refuses counts that name an outcome or a file it does not know, or whose histogram is
// not of DurationBuckets: what a worker sends only counts when it fits the series bootd has.
func (c Counts) check(files []string) error {
	for o, byFile := range c.Transfers {
		if !slices.Contains(Outcomes, o) {
			return fmt.Errorf("unknown outcome %q", o)
		}
		for f := range byFile {
			if f != NoFile && !slices.Contains(files, f) {
				return fmt.Errorf("unknown file %q", f)
			}
		}
	}
	for f := range c.Bytes {
		if f != NoFile && !slices.Contains(files, f) {
			return fmt.Errorf("unknown file %q", f)
		}
	}
	if c.Buckets != nil && len(c.Buckets) != len(DurationBuckets)+1 {
		return fmt.Errorf("%d duration buckets, want %d", len(c.Buckets), len(DurationBuckets)+1)
	}
	if math.IsNaN(c.Seconds) || math.IsInf(c.Seconds, 0) || c.Seconds < 0 {
		return fmt.Errorf("duration sum %v", c.Seconds)
	}
	return nil
}

// decodeCounts reads the counts field of a worker's entry (already decoded as JSON).
func decodeCounts(v any, files []string) (Counts, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Counts{}, err
	}
	var c Counts
	if err := json.Unmarshal(b, &c); err != nil {
		return Counts{}, err
	}
	return c, c.check(files)
}

// clone is a deep copy of c.
func (c Counts) clone() Counts {
	out := Counts{Transfers: map[string]map[string]uint64{}, Bytes: maps.Clone(c.Bytes), Buckets: slices.Clone(c.Buckets), Seconds: c.Seconds}
	for o, files := range c.Transfers {
		out.Transfers[o] = maps.Clone(files)
	}
	return out
}

// tally is the worker's counts as its transfers end.
type tally struct {
	mu      sync.Mutex
	counts  Counts
	changed bool
}

func (t *tally) add(outcome, file string, bytes int64, took time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts.add(outcome, file, bytes, took)
	t.changed = true
}

// take returns the counts, and whether they changed since the last take.
func (t *tally) take() (Counts, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := t.changed
	t.changed = false
	return t.counts.clone(), changed
}

// reportCounts sends the tally to bootd every countsEvery while it changes, until ctx is done.
func (s *service) reportCounts(ctx context.Context) {
	tick := time.NewTicker(countsEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.sendCounts(false)
		}
	}
}

// sendCounts writes the tally as the worker's counts entry: when it changed, or always.
func (s *service) sendCounts(always bool) {
	c, changed := s.counted.take()
	if changed || always {
		s.log.WithField(countsField, c).Info("tftp transfer counts")
	}
}

// TransferMeter is told the transfers of every worker since bootd started, each time a worker
// reports (internal/metrics keeps them for /metrics).
type TransferMeter interface {
	TFTPTransfers(Counts)
}

// workerCounts adds up the reports of the workers one Worker.Serve runs: a worker's counts start
// from zero, so those of workers that ended are kept as a base.
type workerCounts struct {
	meter TransferMeter
	mu    sync.Mutex // the relay reports while Serve folds an ended worker in
	base  Counts     // workers that ended
	last  Counts     // the running worker's last report
}

// report takes a running worker's counts and tells the meter the total.
func (w *workerCounts) report(c Counts) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = c
	if w.meter != nil {
		w.meter.TFTPTransfers(w.base.plus(c))
	}
}

// ended folds the last worker's counts into the base.
func (w *workerCounts) ended() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.base, w.last = w.base.plus(w.last), Counts{}
}
