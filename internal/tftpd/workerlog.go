package tftpd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"
)

// readyField marks the worker's entry that says it is serving; the parent takes it as a signal,
// not a line to log.
const readyField = "tftp_worker_ready"

// maxLogLine bounds one relayed log line; a longer one is cut there.
const maxLogLine = 64 << 10

// relayLog turns the worker's log lines (logrus JSON) into entries of log, at their own level
// (at most error) with their own fields (but none of reserved), so bootd's log keeps one format
// and one level setting. A line that is no such entry (a Go panic, say) is relayed as an error.
// It calls onReady once, at the worker's ready entry, onCounts with each counts entry that
// checks out (counts.go), onSent (when set) at each finished transfer, and returns at the end of r.
func relayLog(r io.Reader, log logrus.FieldLogger, reserved []string, onReady func(), onCounts func(Counts), onSent func(netip.Addr, string)) {
	br := bufio.NewReaderSize(r, maxLogLine)
	readied := false
	for {
		line, cut, err := readLine(br)
		if len(line) > 0 {
			level, msg, fields, ok := parseEntry(line)
			switch {
			case !ok || cut:
				log.WithFields(logrus.Fields{"worker_output": string(line), "cut": cut}).Error("tftp worker wrote an unexpected line")
			case fields[readyField] == true:
				if !readied {
					readied = true
					onReady()
				}
			case fields[countsField] != nil:
				takeCounts(fields[countsField], log, onCounts)
			default:
				if onSent != nil && msg == transferDone {
					sent(fields, onSent)
				}
				log.WithFields(safeFields(fields, reserved)).Log(max(level, logrus.ErrorLevel), safeText(msg)) // lower levels are more severe
			}
		}
		if err != nil {
			return
		}
	}
}

// safeFields drops the reserved keys and any key that could break a text log line (logrus's text
// format writes keys as they are: a newline in one would start a forged line), and counts what it
// dropped. Values are safe: the text format quotes any value that needs it.
func safeFields(fields logrus.Fields, reserved []string) logrus.Fields {
	dropped := 0
	for k := range fields {
		if slices.Contains(reserved, k) || !plainKey(k) {
			delete(fields, k)
			dropped++
		}
	}
	if dropped > 0 {
		fields["worker_fields_dropped"] = dropped
	}
	return fields
}

func plainKey(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// safeText quotes a message that holds control characters, which a terminal's colored log would
// print as they are.
func safeText(msg string) string {
	if strings.IndexFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return strconv.Quote(msg)
	}
	return msg
}

// readLine returns the next line without its newline. A line longer than br's buffer comes back
// cut at that length (cut=true), the rest of it skipped; a last line without a newline comes
// back with io.EOF.
func readLine(br *bufio.Reader) (line []byte, cut bool, err error) {
	line, err = br.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return bytes.TrimSuffix(line, []byte("\n")), false, err
	}
	line = bytes.Clone(line)
	for err == bufio.ErrBufferFull {
		_, err = br.ReadSlice('\n')
	}
	return line, true, err
}

// parseEntry reads one logrus JSON line: its level and message, and its other fields but the
// time (bootd stamps its own).
func parseEntry(line []byte) (logrus.Level, string, logrus.Fields, bool) {
	var fields logrus.Fields
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil || dec.More() {
		return 0, "", nil, false
	}
	levelName, _ := fields[logrus.FieldKeyLevel].(string)
	msg, isString := fields[logrus.FieldKeyMsg].(string)
	level, err := logrus.ParseLevel(levelName)
	if err != nil || !isString {
		return 0, "", nil, false
	}
	for _, k := range []string{logrus.FieldKeyLevel, logrus.FieldKeyMsg, logrus.FieldKeyTime} {
		delete(fields, k)
	}
	return level, msg, fields, true
}

// takeCounts hands a worker's counts entry to onCounts, or logs why it is refused.
func takeCounts(v any, log logrus.FieldLogger, onCounts func(Counts)) {
	c, err := decodeCounts(v, Allowed)
	if err != nil {
		log.WithError(err).Error("tftp worker sent counts bootd does not take")
		return
	}
	onCounts(c)
}

// sent passes a finished transfer's client address and file to onSent; an entry without them
// (none the worker writes) is skipped.
func sent(fields logrus.Fields, onSent func(netip.Addr, string)) {
	client, _ := fields["client"].(string)
	file, _ := fields["file"].(string)
	ap, err := netip.ParseAddrPort(client)
	if err != nil || file == "" {
		return
	}
	onSent(ap.Addr(), file)
}
