package ratelog

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// fakeClock is a clock tests move by hand. Timers armed on it fire only in fire, so a test
// decides whether a line or the timer comes first at a window's end.
type fakeClock struct {
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at   time.Time
	f    func()
	done bool
}

// newLimiter returns a Limiter on a fake clock.
func newLimiter(every time.Duration) (*Limiter, *fakeClock) {
	c := &fakeClock{now: time.Unix(1000, 0)}
	l := New(every)
	l.now = func() time.Time { return c.now }
	l.afterFunc = func(d time.Duration, f func()) func() bool {
		t := &fakeTimer{at: c.now.Add(d), f: f}
		c.timers = append(c.timers, t)
		return func() bool { stopped := !t.done; t.done = true; return stopped }
	}
	return l, c
}

// fire runs the timers due by now, each at its time.
func (c *fakeClock) fire() {
	now := c.now
	for _, t := range c.timers {
		if !t.done && !t.at.After(now) {
			t.done, c.now = true, t.at
			t.f()
		}
	}
	c.now = now
}

func TestAllow(t *testing.T) {
	start := time.Unix(1000, 0)
	type event struct {
		at             time.Duration // after start
		msg            string
		want           bool
		wantSuppressed int
	}
	tests := []struct {
		name   string
		events []event
	}{
		{"first one passes", []event{{0, "a", true, 0}}},
		{"repeats within the interval are held back and counted", []event{
			{0, "a", true, 0}, {time.Second, "a", false, 0}, {2 * time.Second, "a", false, 0},
			{10 * time.Second, "a", true, 2}, {11 * time.Second, "a", false, 0},
		}},
		{"messages are limited apart", []event{
			{0, "a", true, 0}, {time.Second, "b", true, 0}, {2 * time.Second, "a", false, 0},
		}},
		{"a quiet interval resets the count", []event{
			{0, "a", true, 0}, {20 * time.Second, "a", true, 0},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, clock := newLimiter(10 * time.Second)
			for i, e := range tc.events {
				clock.now = start.Add(e.at)
				ok, n := l.allow(e.msg, logrus.New(), logrus.WarnLevel)
				if ok != e.want || n != e.wantSuppressed {
					t.Errorf("event %d (%s at %s): Allow = %v, %d; want %v, %d", i, e.msg, e.at, ok, n, e.want, e.wantSuppressed)
				}
			}
		})
	}
}

// textLog is a logger writing text lines at level and above into the returned buffer.
func textLog(level logrus.Level) (*logrus.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	log := logrus.New()
	log.SetOutput(&buf)
	log.SetLevel(level)
	return log, &buf
}

func TestLogHoldsAFloodToOneLine(t *testing.T) {
	log, buf := textLog(logrus.InfoLevel)
	l := New(time.Hour)
	now := time.Now()
	l.now = func() time.Time { return now }
	for range 1000 {
		l.Log(log.WithField("client", "10.0.0.9:1234"), logrus.WarnLevel, "request refused")
	}
	if got := strings.Count(buf.String(), "request refused"); got != 1 {
		t.Fatalf("%d lines for 1000 refusals, want 1:\n%s", got, buf.String())
	}
	if !strings.Contains(buf.String(), "level=warning") || !strings.Contains(buf.String(), "client=") {
		t.Errorf("line lost its level or fields: %s", buf.String())
	}

	// The next one let through, an interval later, says how many were held back.
	buf.Reset()
	now = now.Add(time.Hour)
	l.Log(log, logrus.WarnLevel, "request refused")
	if !strings.Contains(buf.String(), "suppressed=999") || !strings.Contains(buf.String(), "at_most_every=1h0m0s") {
		t.Errorf("want the held-back count and interval, got %s", buf.String())
	}
}

func TestHeldBackEntriesGoToDebug(t *testing.T) {
	log, buf := textLog(logrus.DebugLevel)
	l := New(time.Hour)
	l.Log(log, logrus.WarnLevel, "refused")
	l.Log(log, logrus.WarnLevel, "refused")
	if got := strings.Count(buf.String(), "level=debug msg=refused"); got != 1 {
		t.Errorf("want the second entry at debug:\n%s", buf.String())
	}
}

// flush, as a step's message, calls Flush.
const flush = "(flush)"

func TestHeldBackCountIsReported(t *testing.T) {
	// A step with a client logs msg at warning with that client; one without fires the timers due;
	// one with msg flush calls Flush.
	type step struct {
		at          time.Duration
		msg, client string
	}
	tests := []struct {
		name  string
		steps []step
		want  []string
	}{
		{"a flood that stops is counted at the end of its window", []step{
			{0, "a", "c1"}, {time.Second, "a", "c2"}, {2 * time.Second, "a", "c3"}, {10 * time.Second, "", ""},
		}, []string{
			"level=warning msg=a client=c1",
			"level=warning msg=a at_most_every=10s client=c3 held_back=2",
		}},
		{"nothing held back, nothing to count", []step{
			{0, "a", "c1"}, {10 * time.Second, "", ""}, {30 * time.Second, "", ""},
		}, []string{
			"level=warning msg=a client=c1",
		}},
		{"a line let through at the window's end counts them, the timer not again", []step{
			{0, "a", "c1"}, {time.Second, "a", "c2"}, {10 * time.Second, "a", "c3"}, {10 * time.Second, "", ""},
			{30 * time.Second, "", ""},
		}, []string{
			"level=warning msg=a client=c1",
			"level=warning msg=a at_most_every=10s client=c3 suppressed=1",
		}},
		{"the count starts a window, and the next line let through does not count again", []step{
			{0, "a", "c1"}, {time.Second, "a", "c2"}, {10 * time.Second, "", ""},
			{11 * time.Second, "a", "c3"}, {15 * time.Second, "a", "c4"}, {20 * time.Second, "", ""},
			{30 * time.Second, "a", "c5"}, {40 * time.Second, "", ""},
		}, []string{
			"level=warning msg=a client=c1",
			"level=warning msg=a at_most_every=10s client=c2 held_back=1",
			"level=warning msg=a at_most_every=10s client=c4 held_back=2",
			"level=warning msg=a client=c5",
		}},
		{"messages are counted apart", []step{
			{0, "a", "c1"}, {0, "b", "c2"}, {time.Second, "a", "c3"}, {10 * time.Second, "", ""},
		}, []string{
			"level=warning msg=a client=c1",
			"level=warning msg=b client=c2",
			"level=warning msg=a at_most_every=10s client=c3 held_back=1",
		}},
		{"a flush counts what is held back, at level", []step{
			{0, "a", "c1"}, {time.Second, "a", "c2"}, {2 * time.Second, "a", "c3"}, {3 * time.Second, flush, ""},
		}, []string{
			"level=warning msg=a client=c1",
			"level=warning msg=a at_most_every=10s client=c3 held_back=2",
		}},
		{"a flush with nothing held back writes nothing", []step{
			{0, "a", "c1"}, {time.Second, flush, ""}, {10 * time.Second, "", ""},
		}, []string{
			"level=warning msg=a client=c1",
		}},
		{"a flush counts only the messages with entries held back, in their order", []step{
			{0, "c", "c1"}, {0, "b", "c2"}, {0, "a", "c3"}, {time.Second, "c", "c4"}, {time.Second, "a", "c5"},
			{2 * time.Second, flush, ""},
		}, []string{
			"level=warning msg=c client=c1",
			"level=warning msg=b client=c2",
			"level=warning msg=a client=c3",
			"level=warning msg=a at_most_every=10s client=c5 held_back=1",
			"level=warning msg=c at_most_every=10s client=c4 held_back=1",
		}},
		{"after a flush, neither the timer nor a second flush counts again", []step{
			{0, "a", "c1"}, {time.Second, "a", "c2"}, {2 * time.Second, flush, ""}, {3 * time.Second, flush, ""},
			{10 * time.Second, "", ""}, {30 * time.Second, "", ""},
		}, []string{
			"level=warning msg=a client=c1",
			"level=warning msg=a at_most_every=10s client=c2 held_back=1",
		}},
		// The flush counts as the entry let through, as the timer's summary does: a Log within the
		// interval after it is held back, and counted once, at the end of the window begun at it.
		{"a flush starts a window: a line in it is held back and counted once", []step{
			{0, "a", "c1"}, {time.Second, "a", "c2"}, {5 * time.Second, flush, ""},
			{6 * time.Second, "a", "c3"}, {14 * time.Second, "a", "c4"}, {15 * time.Second, "", ""},
			{25 * time.Second, "a", "c5"}, {40 * time.Second, "", ""},
		}, []string{
			"level=warning msg=a client=c1",
			"level=warning msg=a at_most_every=10s client=c2 held_back=1",
			"level=warning msg=a at_most_every=10s client=c4 held_back=2",
			"level=warning msg=a client=c5",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log, buf := textLog(logrus.InfoLevel)
			log.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
			l, clock := newLimiter(10 * time.Second)
			start := clock.now
			for _, s := range tc.steps {
				clock.now = start.Add(s.at)
				switch s.msg {
				case "":
					clock.fire()
				case flush:
					l.Flush()
				default:
					l.Log(log.WithField("client", s.client), logrus.WarnLevel, s.msg)
				}
			}
			if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); !slices.Equal(got, tc.want) {
				t.Errorf("got lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestLateTimerWritesNothing covers a timer that fires while a line let through holds the lock:
// its Stop comes too late, and the count went out with the line.
func TestLateTimerWritesNothing(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	l, clock := newLimiter(10 * time.Second)
	start := clock.now
	l.Log(log, logrus.WarnLevel, "a")
	clock.now = start.Add(time.Second)
	l.Log(log, logrus.WarnLevel, "a")
	clock.now = start.Add(10 * time.Second)
	l.Log(log, logrus.WarnLevel, "a")
	clock.now = start.Add(11 * time.Second)
	l.Log(log, logrus.WarnLevel, "a") // held back again: a new timer, a new window
	if len(clock.timers) != 2 {
		t.Fatalf("%d timers armed, want 2", len(clock.timers))
	}
	clock.timers[0].f()
	var counted []any
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && e.Data["suppressed"] != nil {
			counted = append(counted, e.Data["suppressed"])
		}
	}
	if !slices.Equal(counted, []any{1}) {
		t.Errorf("counts reported: %v, want [1]", counted)
	}
}

// TestEveryHeldBackLineIsCountedOnce floods a Limiter with real timers from many goroutines: each
// line held back (at debug) is counted exactly once at level, by a line let through or a timer.
func TestEveryHeldBackLineIsCountedOnce(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	l := New(time.Millisecond)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				l.Log(log, logrus.WarnLevel, "refused")
				if i%50 == 0 {
					time.Sleep(2 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	var debug, counted int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		debug, counted = 0, 0
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.DebugLevel {
				debug++
			} else if n, ok := e.Data["suppressed"].(int); ok {
				counted += n
			} else if n, ok := e.Data["held_back"].(int); ok {
				counted += n
			}
		}
		if counted >= debug {
			break
		}
	}
	if debug == 0 || counted != debug {
		t.Errorf("%d lines held back, %d counted", debug, counted)
	}
}

// TestLateTimerAfterFlushWritesNothing covers a timer that fires while Flush holds the lock: its
// Stop comes too late, and the count went out with the Flush, also when the Flush came in the very
// instant the window began and so left it beginning then.
func TestLateTimerAfterFlushWritesNothing(t *testing.T) {
	for _, flushAt := range []time.Duration{0, 5 * time.Second} {
		t.Run("flush after "+flushAt.String(), func(t *testing.T) {
			log, hook := logtest.NewNullLogger()
			l, clock := newLimiter(10 * time.Second)
			start := clock.now
			l.Log(log, logrus.WarnLevel, "a")
			l.Log(log, logrus.WarnLevel, "a")
			clock.now = start.Add(flushAt)
			l.Flush()
			counts := func() (held []any) {
				for _, e := range hook.AllEntries() {
					if n, ok := e.Data["held_back"]; ok {
						held = append(held, n)
					}
				}
				return held
			}
			if got := counts(); !slices.Equal(got, []any{1}) {
				t.Fatalf("counts after Flush: %v, want [1]", got)
			}
			clock.now = start.Add(10 * time.Second)
			clock.timers[0].f()
			if got := counts(); !slices.Equal(got, []any{1}) {
				t.Errorf("counts after the late timer: %v, want [1]", got)
			}
		})
	}
}

// TestFlushCountsEveryLineOnce logs from many goroutines while another flushes: each line is let
// through (counting 1 and its suppressed) or held back and counted once (held_back), by the
// timer or a Flush. With an hour's interval only the Flushes count; with a millisecond's, lines
// let through and timers race them too.
func TestFlushCountsEveryLineOnce(t *testing.T) {
	for _, every := range []time.Duration{time.Hour, time.Millisecond} {
		t.Run(every.String(), func(t *testing.T) {
			log, hook := logtest.NewNullLogger()
			l := New(every)
			const goroutines, lines = 8, 500
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for i := range lines {
						l.Log(log, logrus.WarnLevel, "refused")
						if i%50 == 0 {
							time.Sleep(2 * time.Millisecond)
						}
					}
				})
			}
			stop := make(chan struct{})
			flushed := make(chan struct{})
			go func() {
				defer close(flushed)
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
						l.Flush()
					}
				}
			}()
			wg.Wait()
			close(stop)
			<-flushed
			l.Flush() // as an owner does at its stop
			var counted int
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				counted = 0
				for _, e := range hook.AllEntries() {
					if n, ok := e.Data["held_back"].(int); ok {
						counted += n
					} else {
						n, _ := e.Data["suppressed"].(int)
						counted += 1 + n
					}
				}
				if counted >= goroutines*lines {
					break
				}
			}
			if counted != goroutines*lines {
				t.Errorf("%d lines logged, %d counted", goroutines*lines, counted)
			}
		})
	}
}
