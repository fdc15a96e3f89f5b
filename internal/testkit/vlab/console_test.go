package vlab

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// WaitConsole reads whole lines only while QEMU runs: a report line the VM is still writing is
// not matched half-written; after QEMU's exit the last line counts as it is.
func TestWaitConsoleWholeLines(t *testing.T) {
	re := regexp.MustCompile(`REPORT: (.*)`)
	for _, tc := range []struct {
		name    string
		console string
		exited  bool
		want    string // the submatch; "" for no match before the deadline
	}{
		{name: "a whole line", console: "boot\nREPORT: all done\r\nmore", want: "all done\r"},
		{name: "a line still being written", console: "boot\nREPORT: all do"},
		{name: "the last line after exit", console: "boot\nREPORT: all do", exited: true, want: "all do"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "console")
			if err := os.WriteFile(path, []byte(tc.console), 0o644); err != nil {
				t.Fatal(err)
			}
			proc := &Process{done: make(chan struct{})}
			if tc.exited {
				close(proc.done)
			}
			vm := &VM{ConsolePath: path, proc: proc}
			ctx, cancel := context.WithTimeout(context.Background(), 3*pollInterval)
			defer cancel()
			m, err := vm.WaitConsole(ctx, re)
			switch {
			case tc.want == "" && err == nil:
				t.Errorf("matched %q in a line not yet whole", m[0])
			case tc.want != "" && (err != nil || m[1] != tc.want):
				t.Errorf("got %q, %v; want %q", m, err, tc.want)
			}
		})
	}
}
