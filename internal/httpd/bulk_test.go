package httpd

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testhook"
	"golang.org/x/sys/unix"
)

// hookSendfile replaces sendfile(2) for one test. The copiers read the variable at each call.
func hookSendfile(t *testing.T, hook func(dst, src int, off *int64, n int) (int, error)) {
	t.Helper()
	testhook.Set(t, &sendfileSyscall, hook)
}

// A file download's sendfile calls run on copier threads at copierNice, and no other thread of
// the process is lowered. The bytes are the file's, for a whole file and for a range.
func TestDownloadsSentByLoweredCopiers(t *testing.T) {
	base, err := niceOf(0)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var during []int // each sendfile call's thread nice
	hookSendfile(t, func(dst, src int, off *int64, n int) (int, error) {
		nice, err := niceOf(unix.Gettid())
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		during = append(during, nice)
		mu.Unlock()
		return unix.Sendfile(dst, src, off, n)
	})

	dir := t.TempDir()
	content := make([]byte, 3<<20+17)
	_, _ = rand.Read(content)
	if err := os.WriteFile(filepath.Join(dir, "vmlinuz"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := serveLoopbackFrom(t, dir)
	lowered := min(base+copierNice, 19)

	for _, tc := range []struct {
		name, rangeHeader string
		want              []byte
		copied            bool // net/http writes a body's first 512 bytes itself
	}{
		{"whole file", "", content, true},
		{"a range", "bytes=1000-2000000", content[1000:2000001], true},
		{"the last bytes", "bytes=-17", content[len(content)-17:], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			during = nil
			mu.Unlock()
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
			if copied := len(during) > 0; copied != tc.copied {
				t.Fatalf("sent by the copiers: %v, want %v", copied, tc.copied)
			}
			for i, nice := range during {
				if nice != lowered {
					t.Errorf("sendfile call %d ran at nice %d, want %d", i, nice, lowered)
				}
			}
			if n := threadsAt(t, lowered); n > copiers {
				t.Errorf("%d threads at nice %d, but only the %d copiers may be", n, lowered, copiers)
			}
		})
	}
}

// threadsAt counts the process's threads at the given nice.
func threadsAt(t *testing.T, nice int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		tid, _ := strconv.Atoi(e.Name())
		if got, err := niceOf(tid); err == nil && got == nice { // a thread may have ended since
			n++
		}
	}
	return n
}

// However many downloads run at once, no more sendfile calls are in flight than there are
// copiers, and the downloads do share them (more than one call in flight).
func TestCopiersBoundSendfile(t *testing.T) {
	downloads := 4 * copiers
	var inFlight, most atomic.Int32
	hookSendfile(t, func(dst, src int, off *int64, n int) (int, error) {
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		time.Sleep(2 * time.Millisecond) // so that calls would overlap if nothing bounded them
		return unix.Sendfile(dst, src, off, min(n, 64<<10))
	})

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
	if got := int(most.Load()); got != copiers {
		t.Errorf("at most %d sendfile calls in flight, want %d (the copiers)", got, copiers)
	}
}

// sendfile's loop over copier calls: what each answer of sendfile(2) makes of the bytes sent
// and the error returned.
func TestSendfileAnswers(t *testing.T) {
	type answer struct {
		n   int
		err error
	}
	for _, tc := range []struct {
		name    string
		answers []answer // in order; the limit is 100 bytes
		sent    int64
		wantErr error
	}{
		{"all at once", []answer{{100, nil}}, 100, nil},
		{"in parts", []answer{{60, nil}, {40, nil}}, 100, nil},
		{"socket full after a part", []answer{{30, nil}, {-1, unix.EAGAIN}}, 30, unix.EAGAIN},
		{"interrupted, then on", []answer{{-1, unix.EINTR}, {100, nil}}, 100, nil},
		{"file ends early", []answer{{70, nil}, {0, nil}}, 70, nil},
		{"hard error", []answer{{10, nil}, {-1, unix.EIO}}, 10, unix.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			hookSendfile(t, func(dst, src int, off *int64, n int) (int, error) {
				i := int(calls.Add(1)) - 1
				if i >= len(tc.answers) {
					t.Errorf("call %d: more calls than answers", i+1)
					return 0, unix.EIO
				}
				return tc.answers[i].n, tc.answers[i].err
			})
			sent, err := sendfile(-1, -1, 100)
			if sent != tc.sent || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("sent %d, err %v; want %d, %v", sent, err, tc.sent, tc.wantErr)
			}
			if int(calls.Load()) != len(tc.answers) {
				t.Errorf("%d calls, want %d", calls.Load(), len(tc.answers))
			}
		})
	}
}

// When every copier is stuck (a disk that does not answer), a download waiting for one gives up
// after sendTimeout instead of piling up.
func TestCopierWaitIsBounded(t *testing.T) {
	testhook.Set(t, &sendTimeout, 50*time.Millisecond)
	release := make(chan struct{})
	var stuck sync.WaitGroup
	stuck.Add(copiers)
	hookSendfile(t, func(dst, src int, off *int64, n int) (int, error) {
		stuck.Done()
		<-release
		return 0, nil
	})
	var held sync.WaitGroup
	for range copiers {
		held.Go(func() { _, _ = onCopier(-1, -1, 1) })
	}
	stuck.Wait() // every copier is inside a call
	_, err := onCopier(-1, -1, 1)
	close(release)
	held.Wait()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("with every copier stuck: %v, want a deadline error", err)
	}
}
