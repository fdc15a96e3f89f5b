package ratelog

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

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
			l := New(10 * time.Second)
			var now time.Time
			l.now = func() time.Time { return now }
			for i, e := range tc.events {
				now = start.Add(e.at)
				ok, n := l.Allow(e.msg)
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
