// Package ratelog logs events that anyone on the lab segment can trigger at most once per interval
// each, so a flood of them cannot fill the disk through the log.
package ratelog

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/logfield"
)

// Limiter lets one entry per message through per interval and counts the ones it held back.
// Messages, not clients, are the keys: a flood from made-up MACs or spoofed addresses would
// otherwise grow the table without bound. The zero value is not usable: see New.
type Limiter struct {
	every     time.Duration
	now       func() time.Time                               // for tests
	afterFunc func(time.Duration, func()) (stop func() bool) // for tests

	mu   sync.Mutex
	seen map[string]*window
}

// window is one message's state since the last entry let through (or summary written). Each window
// is a new value: a summary's timer knows its own by pointer, so one that fires after its window
// ended writes nothing.
type window struct {
	last       time.Time
	suppressed int
	// The last held-back entry's logger and level, for the summary.
	log   logrus.FieldLogger
	level logrus.Level
	// stop cancels the summary's timer. It is armed only while entries are held back, so an idle
	// Limiter has no timers.
	stop func() bool
}

// Every is the listeners' interval: one line per kind per 10 s is enough to see that something
// happens and what, and few enough that a flood writes little.
const Every = 10 * time.Second

// New returns a Limiter that lets each message through at most once per every.
func New(every time.Duration) *Limiter {
	return &Limiter{every: every, now: time.Now, seen: map[string]*window{},
		afterFunc: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }}
}

// Log writes msg at level when it is the first with msg in the interval, and otherwise at debug
// level, so nothing is lost where debug logging is on. The next entry let through says how many
// were held back ("suppressed") and the interval ("at_most_every"). Since a flood may stop and no
// such entry come, the end of an interval with held-back entries also says it: the last one held
// back goes out at level, counting them all, itself included ("held_back"), as it does at Flush.
// Otherwise the count would never reach a log at level.
func (l *Limiter) Log(log logrus.FieldLogger, level logrus.Level, msg string) {
	if ok, n := l.allow(msg, log, level); ok {
		l.write(log, level, msg, n)
	} else {
		log.Debug(msg)
	}
}

// allow reports whether an entry with message msg may be logged now, and how many entries with it
// were held back since the last one let through. Holding one back keeps its log and level for the
// summary at the end of the window.
func (l *Limiter) allow(msg string, log logrus.FieldLogger, level logrus.Level) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	w := l.seen[msg]
	if w != nil && now.Sub(w.last) < l.every {
		w.suppressed++
		w.log, w.level = log, level
		if w.stop == nil {
			w.stop = l.afterFunc(w.last.Add(l.every).Sub(now), func() { l.summarize(msg, w) })
		}
		return false, 0
	}
	n := 0
	if w != nil {
		n = w.suppressed
		if w.stop != nil {
			w.stop() // this entry reports them; a timer that fired already finds w replaced
		}
	}
	l.seen[msg] = &window{last: now}
	return true, n
}

// summarize writes the count of the entries held back in window w, unless w has ended: an entry
// let through, or a Flush, reported them and began a new window. The summary counts as the entry
// let through, so a flood that goes on writes one line per interval, not two.
func (l *Limiter) summarize(msg string, w *window) {
	l.mu.Lock()
	if l.seen[msg] != w {
		l.mu.Unlock()
		return
	}
	write := l.restart(msg)
	l.mu.Unlock()
	write()
}

// Flush writes now, in the order of their messages, the count of every message with entries held
// back, as the end of its window would, and starts that window again. Owners call it as they stop:
// the count of a window still open then would otherwise never reach a log at level. The Limiter
// stays usable: a Log after a Flush is held back until the window begun at the Flush ends.
func (l *Limiter) Flush() {
	l.mu.Lock()
	var writes []func()
	for _, msg := range slices.Sorted(maps.Keys(l.seen)) {
		if w := l.seen[msg]; w.suppressed > 0 {
			w.stop() // a timer that fired already finds w replaced
			writes = append(writes, l.restart(msg))
		}
	}
	l.mu.Unlock()
	for _, write := range writes {
		write()
	}
}

// restart ends msg's window, begins a new one now, and returns the summary of what the ended one
// held back, to be written once l.mu is released.
func (l *Limiter) restart(msg string) (write func()) {
	w := l.seen[msg]
	log, level, n := w.log, w.level, w.suppressed
	l.seen[msg] = &window{last: l.now()}
	// held_back, not suppressed: this line is one of the n (the last, its fields), where a line
	// let through stands for itself and its suppressed count of others.
	return func() {
		log.WithFields(logrus.Fields{"held_back": n, "at_most_every": logfield.Duration(l.every)}).Log(level, msg)
	}
}

// write logs msg at level, with the count of held-back entries if there were any.
func (l *Limiter) write(log logrus.FieldLogger, level logrus.Level, msg string, suppressed int) {
	if suppressed == 0 {
		log.WithFields(nil).Log(level, msg)
		return
	}
	log.WithFields(logrus.Fields{"suppressed": suppressed, "at_most_every": logfield.Duration(l.every)}).Log(level, msg)
}
