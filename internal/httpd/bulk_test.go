package httpd

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLoweredIsPerThreadAndRestored: inside, this thread runs at +10 while another thread of
// the process keeps its nice; afterwards the thread is back where it was.
func TestLoweredIsPerThreadAndRestored(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	before, err := niceOf(tid)
	if err != nil {
		t.Fatal(err)
	}
	other := make(chan int)
	go func() {
		runtime.LockOSThread() // a thread of its own, not this one
		defer runtime.UnlockOSThread()
		other <- unix.Gettid()
	}()
	otherTID := <-other
	otherBefore, err := niceOf(otherTID)
	if err != nil {
		t.Fatal(err)
	}
	var inside, otherInside int
	restored := lowered(bulkNice, func() {
		inside, _ = niceOf(tid)
		otherInside, _ = niceOf(otherTID)
	})
	if want := min(before+bulkNice, 19); inside != want {
		t.Errorf("nice while lowered = %d, want %d", inside, want)
	}
	if otherInside != otherBefore {
		t.Errorf("another thread's nice changed to %d (was %d): nice must be per thread", otherInside, otherBefore)
	}
	after, err := niceOf(tid)
	if err != nil {
		t.Fatal(err)
	}
	if restored != (after == before) {
		t.Errorf("lowered reports restored %v, but nice is %d after, %d before", restored, after, before)
	}
	// Going back up needs root (or RLIMIT_NICE): bootd serve runs as root, and so does CI.
	if os.Geteuid() == 0 && !restored {
		t.Errorf("as root, the thread's nice was not restored: %d, was %d", after, before)
	}
}
