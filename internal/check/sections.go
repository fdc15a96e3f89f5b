package check

import (
	"strconv"
	"strings"
)

// The scripts print each command's output as a section: a line "<marker> <name>", the output,
// then "<marker> rc <exit status>". The marker holds the run's nonce, so nothing a node prints
// can pass for one; each marker line follows an empty line, so output without a final newline
// cannot swallow it.

// section is one command's output and exit status; rc is -1 when its end never came (the
// script stopped, or the connection broke, in the middle).
type section struct {
	out string
	rc  int
}

// ok reports whether the section's command ran and succeeded.
func (s section) ok() bool { return s.rc == 0 }

// sections parses a script's output into sections by name. A name seen twice keeps the last.
func sections(marker, out string) map[string]section {
	got := map[string]section{}
	var name string
	var body []string
	open := false
	for _, line := range strings.Split(out, "\n") {
		rest, isMarker := strings.CutPrefix(line, marker+" ")
		switch {
		case !isMarker:
			if open {
				body = append(body, line)
			}
		case strings.HasPrefix(rest, "rc "):
			if open {
				rc, err := strconv.Atoi(strings.TrimPrefix(rest, "rc "))
				if err != nil {
					rc = -1
				}
				got[name] = section{out: strings.TrimSpace(strings.Join(body, "\n")), rc: rc}
				open = false
			}
		default:
			if open { // the previous section never ended
				got[name] = section{out: strings.TrimSpace(strings.Join(body, "\n")), rc: -1}
			}
			name, body, open = rest, nil, true
		}
	}
	if open {
		got[name] = section{out: strings.TrimSpace(strings.Join(body, "\n")), rc: -1}
	}
	return got
}

// shellHelpers defines sec NAME and rc STATUS for a script, with the marker in $M.
func shellHelpers(marker string) string {
	return "M=" + quote(marker) + "\nsec() { echo; echo \"$M $1\"; }\nrc() { echo; echo \"$M rc $1\"; }\n"
}

// quote quotes s for a POSIX shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// lastLines is the end of a command's output, for a report: at most n lines of at most 200
// characters each.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > 200 {
			lines[i] = l[:200] + "..."
		}
	}
	return strings.Join(lines, " / ")
}
