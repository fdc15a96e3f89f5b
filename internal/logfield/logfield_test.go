package logfield

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// TestDurationInJSON logs a duration field through logrus's JSON formatter, as bootd and
// imgbuild do under --log-format json, and wants it back as the duration string.
func TestDurationInJSON(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{16 * time.Millisecond, "16ms"},
		{100 * time.Millisecond, "100ms"},
		{1234567 * time.Microsecond, "1.235s"},
		{2*time.Minute + 3500*time.Millisecond, "2m3.5s"},
		{400 * time.Microsecond, "0s"},
		{0, "0s"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			var buf bytes.Buffer
			log := logrus.New()
			log.SetOutput(&buf)
			log.SetFormatter(&logrus.JSONFormatter{})
			log.WithField("duration", Duration(tt.d)).Info("done")
			var line map[string]any
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatalf("log line %q: %v", buf.String(), err)
			}
			if got, ok := line["duration"].(string); !ok || got != tt.want {
				t.Fatalf("duration field %#v (%T) in %s, want the string %q", line["duration"], line["duration"], buf.String(), tt.want)
			}
			if back, err := time.ParseDuration(tt.want); err != nil || (back-tt.d).Abs() > time.Millisecond/2 {
				t.Errorf("%q parses back as %v (%v), want %v to the millisecond", tt.want, back, err, tt.d)
			}
		})
	}
}
