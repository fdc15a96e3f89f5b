// Package logfield spells log field values that could be written more than one way, one way
// for the whole project, so that a log collector (and a reader) sees one form per kind.
package logfield

import "time"

// Duration is the form of every time span in a log field: Go's duration string, rounded to
// the millisecond ("16ms", "1.234s", "2m3.5s").
//
// Why a string: logrus's JSON formatter writes a raw time.Duration as integer nanoseconds
// ("duration":16000000), unreadable beside "100ms" and easily taken for milliseconds. The
// string reads the same in text and JSON lines, survives bootd's relay of its TFTP worker's
// JSON lines unchanged (a number comes back from that as a float64), and collectors parse it
// as it is (Go's time.ParseDuration, Loki's duration()). Milliseconds: the spans logged are
// transfers, verifications, sweeps and builds, where finer digits are noise.
func Duration(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}
