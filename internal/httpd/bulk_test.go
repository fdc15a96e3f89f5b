package httpd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/testhook"
	"golang.org/x/sys/unix"
)

// fakePhase is a BootPhase the test sets, recording who asked.
type fakePhase struct {
	booting atomic.Bool
	mu      sync.Mutex
	asked   []netip.Addr
}

func (p *fakePhase) Asked(a netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, a)
}

func (p *fakePhase) Booting() bool { return p.booting.Load() }

// While machines boot, a file download's sendfile calls run on copier threads at copierNice;
// otherwise on the download's own thread, not lowered. No other thread of the process is lowered,
// and each request tells the phase where it came from. The bytes are the file's, for a whole file
// and for a range.
func TestDownloadsYieldWhileMachinesBoot(t *testing.T) {
	base, err := niceOf(0)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var during []int // each sendfile call's thread nice
	testhook.Set(t, &sendfileSyscall, func(dst, src int, off *int64, n int) (int, error) {
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
	phase := &fakePhase{}
	addr := serveLoopbackPhase(t, dir, phase)
	lowered := min(base+copierNice, 19)

	for _, tc := range []struct {
		name, rangeHeader string
		booting           bool
		want              []byte
		sent              bool // by sendfile: net/http writes a body's first 512 bytes itself
	}{
		{"whole file, machines booting", "", true, content, true},
		{"a range, machines booting", "bytes=1000-2000000", true, content[1000:2000001], true},
		{"the last bytes, machines booting", "bytes=-17", true, content[len(content)-17:], false},
		{"whole file, none booting", "", false, content, true},
		{"a range, none booting", "bytes=1000-2000000", false, content[1000:2000001], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			during = nil
			mu.Unlock()
			phase.booting.Store(tc.booting)
			phase.mu.Lock()
			phase.asked = nil
			phase.mu.Unlock()
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
			phase.mu.Lock()
			if want := []netip.Addr{netip.MustParseAddr("127.0.0.1")}; !slices.Equal(phase.asked, want) {
				t.Errorf("the phase was told of requests from %v, want %v", phase.asked, want)
			}
			phase.mu.Unlock()
			mu.Lock()
			defer mu.Unlock()
			if sent := len(during) > 0; sent != tc.sent {
				t.Fatalf("sent by sendfile: %v, want %v", sent, tc.sent)
			}
			want := base
			if tc.booting {
				want = lowered
			}
			for i, nice := range during {
				if nice != want {
					t.Errorf("sendfile call %d ran at nice %d, want %d", i, nice, want)
				}
			}
			// At nice 19 already nothing can be lowered, and every thread is "at" lowered.
			if n := threadsAt(t, lowered); lowered != base && n > copiers {
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
// copiers, whether the copiers or the downloads' own threads make them, or both at once (the
// phase changing under them), and the downloads do share them (more than one call in flight).
func TestSlotsBoundSendfile(t *testing.T) {
	for _, tc := range []struct {
		name            string
		booting, change bool // the phase at first; whether each call turns it over
	}{
		{"machines booting", true, false},
		{"none booting", false, false},
		{"machines booting, then not, and so on", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			phase := &fakePhase{}
			phase.booting.Store(tc.booting)
			testSlotsBound(t, phase, tc.change)
		})
	}
}

// testSlotsBound runs 4 × copiers downloads at once from a server yielding to phase, turning the
// phase over at each call when change is set.
func testSlotsBound(t *testing.T, phase *fakePhase, change bool) {
	downloads := 4 * copiers
	var inFlight, most atomic.Int32
	testhook.Set(t, &sendfileSyscall, func(dst, src int, off *int64, n int) (int, error) {
		if change {
			phase.booting.Store(!phase.booting.Load())
		}
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
	addr := serveLoopbackPhase(t, dir, phase)
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
		t.Errorf("at most %d sendfile calls in flight, want %d (the slots)", got, copiers)
	}
}

// sendfile's loop over calls, on the copiers or not: what each answer of sendfile(2) makes of the
// bytes sent and the error returned.
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
		for _, onCopiers := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, on the copiers: %v", tc.name, onCopiers), func(t *testing.T) {
				var calls atomic.Int32
				testhook.Set(t, &sendfileSyscall, func(dst, src int, off *int64, n int) (int, error) {
					i := int(calls.Add(1)) - 1
					if i >= len(tc.answers) {
						t.Errorf("call %d: more calls than answers", i+1)
						return 0, unix.EIO
					}
					return tc.answers[i].n, tc.answers[i].err
				})
				sent, err := sendfile(-1, -1, 100, func() bool { return onCopiers })
				if sent != tc.sent || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
					t.Errorf("sent %d, err %v; want %d, %v", sent, err, tc.sent, tc.wantErr)
				}
				if int(calls.Load()) != len(tc.answers) {
					t.Errorf("%d calls, want %d", calls.Load(), len(tc.answers))
				}
			})
		}
	}
}

// When every slot holds a stuck call (a disk that does not answer), a download waiting for one
// gives up after sendTimeout instead of piling up, on the copiers or not.
func TestSlotWaitIsBounded(t *testing.T) {
	for _, onCopiers := range []bool{true, false} {
		t.Run(fmt.Sprintf("on the copiers: %v", onCopiers), func(t *testing.T) {
			testhook.Set(t, &sendTimeout, 50*time.Millisecond)
			release := make(chan struct{})
			var stuck sync.WaitGroup
			stuck.Add(copiers)
			testhook.Set(t, &sendfileSyscall, func(dst, src int, off *int64, n int) (int, error) {
				stuck.Done()
				<-release
				return 0, nil
			})
			var held sync.WaitGroup
			t.Cleanup(func() { close(release); held.Wait() }) // before the hook is put back
			for range copiers {
				held.Go(func() { _, _ = sendCall(-1, -1, 1, onCopiers) })
			}
			stuck.Wait() // every slot is inside a call
			probe := make(chan error, 1)
			go func() { _, err := sendCall(-1, -1, 1, onCopiers); probe <- err }()
			select {
			case err := <-probe:
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("with every slot stuck: %v, want a deadline error", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a download still waits for a slot 5 s after sendTimeout (50 ms)")
			}
		})
	}
}

// Serve returns once the requests in flight have ended, not as soon as shutting down begins,
// whether a stop or a failed listener begins it: bootd's stop (and a test's restore of a hooked
// variable) comes after the last download's call, and the Flush of the held-back log lines after
// the last line.
func TestServeWaitsForDownloads(t *testing.T) {
	for _, tc := range []struct {
		name    string
		end     func(stop context.CancelFunc, ln net.Listener)
		wantErr error
	}{
		{"stopped", func(stop context.CancelFunc, _ net.Listener) { stop() }, nil},
		{"listener failed", func(_ context.CancelFunc, ln net.Listener) { ln.Close() }, net.ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inCall, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			testhook.Set(t, &sendfileSyscall, func(dst, src int, off *int64, n int) (int, error) {
				once.Do(func() { close(inCall); <-release })
				return unix.Sendfile(dst, src, off, n)
			})
			releaseCopier := sync.OnceFunc(func() { close(release) })
			t.Cleanup(releaseCopier) // a failed test leaves no copier stuck in the hook for the next test
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "vmlinuz"), bytes.Repeat([]byte("k"), 1<<20), 0o644); err != nil {
				t.Fatal(err)
			}
			ln, stop, served := startLoopback(t, dir)
			got := make(chan int64, 1)
			go func() {
				resp, err := http.Get("http://" + ln.Addr().String() + "/images/compute/1/vmlinuz")
				if err != nil {
					got <- -1
					return
				}
				defer resp.Body.Close()
				n, _ := io.Copy(io.Discard, resp.Body)
				got <- n
			}()
			select {
			case <-inCall:
			case <-time.After(10 * time.Second):
				t.Fatal("the download never reached sendfile")
			}
			tc.end(stop, ln)
			select {
			case err := <-served:
				t.Fatalf("Serve returned (%v) while a download was in flight", err)
			case <-time.After(200 * time.Millisecond):
			}
			releaseCopier()
			select {
			case err := <-served:
				if !errors.Is(err, tc.wantErr) { // errors.Is(err, nil): err == nil
					t.Fatalf("Serve: %v, want %v", err, tc.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Serve still running 10 s after the download in flight was let go")
			}
			if n := <-got; n != 1<<20 {
				t.Errorf("the download in flight got %d of %d bytes", n, 1<<20)
			}
		})
	}
}

// A client that stops reading cannot hold bootd's stop: after shutdownGrace its download is cut
// and Serve returns, long before the stalled send's own timeout (sendTimeout, 60 s).
func TestServeCutsStalledDownloads(t *testing.T) {
	testhook.Set(t, &shutdownGrace, 100*time.Millisecond)
	dir := t.TempDir()
	const size = 256 << 20 // far more than loopback's socket buffers hold
	f, err := os.Create(filepath.Join(dir, "vmlinuz"))
	if err == nil {
		err = errors.Join(f.Truncate(size), f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	ln, cancel, served := startLoopback(t, dir)
	addr := ln.Addr().String()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /images/compute/1/vmlinuz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("status line %q, %v", line, err)
	}
	time.Sleep(200 * time.Millisecond) // the server fills the socket buffers and waits
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still waits for a stalled download 10 s after shutting down began (grace 100 ms)")
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := io.Copy(io.Discard, r); n >= size || os.IsTimeout(err) {
		t.Errorf("the stalled client read %d more bytes (%v); want its connection closed before the end", n, err)
	}
}
