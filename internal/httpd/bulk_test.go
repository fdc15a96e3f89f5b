package httpd

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A file download's sendfile calls run at bulkNice on the sending thread, and nothing else does:
// after the download every thread of the process is back at its nice. The bytes are the file's,
// for a whole file and for a range.
func TestDownloadsSendLowered(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("putting a thread's priority back up needs root (bootd serve runs as root; CI's tests run as root)")
	}
	base := threadNices(t)
	var mu sync.Mutex
	var during []int // each sendfile call's thread nice
	real := sendfileSyscall
	sendfileSyscall = func(dst, src int, off *int64, n int) (int, error) {
		nice, err := niceOf(unix.Gettid())
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		during = append(during, nice)
		mu.Unlock()
		return real(dst, src, off, n)
	}
	t.Cleanup(func() { sendfileSyscall = real })

	dir := t.TempDir()
	content := make([]byte, 3<<20+17)
	_, _ = rand.Read(content)
	if err := os.WriteFile(filepath.Join(dir, "vmlinuz"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := serveLoopbackFrom(t, dir)

	for _, tc := range []struct {
		name, rangeHeader string
		want              []byte
		lowered           bool // net/http writes a body's first 512 bytes itself
	}{
		{"whole file", "", content, true},
		{"a range", "bytes=1000-2000000", content[1000:2000001], true},
		{"the last bytes", "bytes=-17", content[len(content)-17:], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			during = nil
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/images/compute/1/vmlinuz", nil)
			if tc.rangeHeader != "" {
				req.Header.Set("Range", tc.rangeHeader)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("got %d bytes (err %v), want the file's %d", len(got), err, len(tc.want))
			}
			mu.Lock()
			defer mu.Unlock()
			if lowered := len(during) > 0; lowered != tc.lowered {
				t.Fatalf("sent at bulkNice: %v, want %v", lowered, tc.lowered)
			}
			for i, nice := range during {
				if want := min(base[0]+bulkNice, 19); nice != want {
					t.Errorf("sendfile call %d ran at nice %d, want %d", i, nice, want)
				}
			}
			for tid, nice := range threadNices(t) {
				if nice != base[0] {
					t.Errorf("thread %d at nice %d after the download, want %d", tid, nice, base[0])
				}
			}
		})
	}
}

// threadNices is every thread's nice, by thread id; base[0] is the process's.
func threadNices(t *testing.T) map[int]int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	nices := map[int]int{}
	for _, e := range entries {
		tid, _ := strconv.Atoi(e.Name())
		if n, err := niceOf(tid); err == nil { // a thread may have ended since
			nices[tid] = n
		}
	}
	if nices[0], err = niceOf(0); err != nil {
		t.Fatal(fmt.Errorf("own nice: %w", err))
	}
	return nices
}

// However many downloads run at once, no more sendfile calls are in flight than there are copy
// slots, and downloads do share the slots (more than one call in flight).
func TestCopySlotsBoundSendfile(t *testing.T) {
	const slots, downloads = 2, 8
	oldSlots, real := copySlots, sendfileSyscall
	copySlots = make(chan struct{}, slots)
	var inFlight, most atomic.Int32
	sendfileSyscall = func(dst, src int, off *int64, n int) (int, error) {
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(2 * time.Millisecond) // so that calls would overlap if nothing bounded them
		return real(dst, src, off, min(n, 64<<10))
	}
	t.Cleanup(func() { copySlots, sendfileSyscall = oldSlots, real })

	dir := t.TempDir()
	const size = 1 << 20
	if err := os.WriteFile(filepath.Join(dir, "vmlinuz"), bytes.Repeat([]byte("k"), size), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := serveLoopbackFrom(t, dir)
	var wg sync.WaitGroup
	for range downloads {
		wg.Go(func() {
			resp, err := http.Get("http://" + addr + "/images/compute/1/vmlinuz")
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			if n, err := io.Copy(io.Discard, resp.Body); n != size || err != nil {
				t.Errorf("got %d of %d bytes: %v", n, size, err)
			}
		})
	}
	wg.Wait()
	if got := most.Load(); got != slots {
		t.Errorf("at most %d sendfile calls in flight, want %d (the slots)", got, slots)
	}
}
