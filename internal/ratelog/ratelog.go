// Package ratelog logs events that anyone on the lab segment can trigger at most once per interval
// each, so a flood of them cannot fill the disk through the log.
package ratelog

import (
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Limiter lets one entry per message through per interval and counts the ones it held back.
// Messages, not clients, are the keys: a flood from made-up MACs or spoofed addresses would
// otherwise grow the table without bound. The zero value is not usable: see New.
type Limiter struct {
	every time.Duration
	now   func() time.Time // for tests

	mu   sync.Mutex
	seen map[string]*window
}

type window struct {
	last       time.Time
	suppressed int
}

// Every is the listeners' interval: one line per kind per 10 s is enough to see that something
// happens and what, and few enough that a flood writes little.
const Every = 10 * time.Second

// New returns a Limiter that lets each message through at most once per every.
func New(every time.Duration) *Limiter {
	return &Limiter{every: every, now: time.Now, seen: map[string]*window{}}
}

// Allow reports whether an entry with message msg may be logged now, and how many entries with it
// were held back since the last one let through.
func (l *Limiter) Allow(msg string) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	w := l.seen[msg]
	if w == nil {
		w = &window{}
		l.seen[msg] = w
	}
	if !w.last.IsZero() && now.Sub(w.last) < l.every {
		w.suppressed++
		return false, 0
	}
	n := w.suppressed
	w.last, w.suppressed = now, 0
	return true, n
}

// Log writes msg at level when Allow lets it through, and otherwise at debug level, so nothing is
// lost where debug logging is on. After held-back entries, the one let through says how many
// ("suppressed", since the last one let through) and the interval ("at_most_every").
func (l *Limiter) Log(log logrus.FieldLogger, level logrus.Level, msg string) {
	ok, n := l.Allow(msg)
	switch {
	case !ok:
		log.Debug(msg)
	case n > 0:
		log.WithFields(logrus.Fields{"suppressed": n, "at_most_every": l.every.String()}).Log(level, msg)
	default:
		log.WithFields(nil).Log(level, msg)
	}
}
