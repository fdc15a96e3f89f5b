package httpd

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// In a boot storm the image downloads would take the CPU that DHCP, TFTP and the boot scripts
// need to answer in time: on two cores with 200 downloads, each sat in sendfile on a thread of
// its own, the Go runtime's Ps were held by those system calls, and DHCP ACKs left seconds late
// (docs/benchmarks-log.md, item 13). So a download's sendfile calls are bounded, and lowered while
// machines boot:
//
//   - at most as many calls at once as the runtime has Ps at start (slots; at least two, so that
//     one call waiting for the disk does not stop every download): more calls at once copy no
//     faster, and nginx, one event loop per core, never has more either. `bootd serve` adds as
//     many Ps (ExtraProcs), so calls in flight never hold them all;
//   - while some machine is between its DHCP lease and its first HTTP request (Options.Phase),
//     each call runs on one of as many copier threads, at nice +4 for good: a thread answering
//     DHCP or a boot script, and the TFTP worker, get a core first. Lowering a download's own
//     thread for the whole download (tried first) let the kernel preempt it while it ran Go
//     code and held a P, and the DHCP goroutines queued on that P waited with it. A copier runs
//     nothing but its calls. Lowering needs no privilege;
//   - otherwise each call runs on the download's own thread. Handing it to a copier costs two
//     thread switches, which made bootd 2.5–4% slower than nginx until all were done in storms
//     of 10, nearly all downloads (items 18 and 19).
//
// A download still gets every cycle nothing else wants, so an idle or link-bound server copies as
// fast as before; the calls queue only when more downloads are ready to send than there are
// slots.

// copierNice is how much lower than the rest of bootd the copier threads run.
const copierNice = 4

// copiers is the number of copier threads, and of slots: the Ps at start (cgroup limits
// included), at least 2.
var copiers = max(runtime.GOMAXPROCS(0), 2)

// ExtraProcs is how many Go Ps a server should add for its downloads: one per slot, since a call
// in flight holds its P while inside sendfile until the runtime takes it back.
func ExtraProcs() int { return copiers }

// sendfileSyscall is sendfile(2); a variable so that tests can look at the thread during a call.
var sendfileSyscall = unix.Sendfile

// slots bounds the sendfile calls in flight, on the copiers and on downloads' own threads alike,
// to the Ps that ExtraProcs added. There must be no more slots than copiers: a call holding a
// slot then always finds a copier free or about to be, and only the wait for a slot, which
// sendTimeout bounds, can be long.
var slots = make(chan struct{}, copiers)

// copyJob is one sendfile call for a copier; the answer goes to done (buffered: a copier never
// waits for the download that asked).
type copyJob struct {
	dst, src, count int
	done            chan copyResult
}

type copyResult struct {
	n   int
	err error
}

var (
	copyJobs     chan copyJob // unbuffered: a call waits until a copier is free (briefly: see slots)
	startCopiers sync.Once
)

// jobs starts the copiers on first use and returns their queue.
func jobs() chan copyJob {
	startCopiers.Do(func() {
		copyJobs = make(chan copyJob)
		for range copiers {
			go copier(copyJobs)
		}
	})
	return copyJobs
}

// copier runs sendfile calls on a thread of its own, lowered by copierNice (kept at its nice
// where that cannot be changed).
func copier(queue <-chan copyJob) {
	runtime.LockOSThread() // never unlocked: the lowered thread serves nothing else
	tid := unix.Gettid()
	if nice, err := niceOf(tid); err == nil {
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, min(nice+copierNice, 19))
	}
	for j := range queue {
		n, err := sendfileSyscall(j.dst, j.src, nil, j.count)
		j.done <- copyResult{n, err}
	}
}

// niceOf is thread tid's nice (0: the calling thread's). The raw system call answers 20 - nice.
func niceOf(tid int) (int, error) {
	p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	return 20 - p, err
}

// bulkListener hands out connections whose file downloads are sent in bounded sendfile calls,
// on the copiers while onCopiers says so.
type bulkListener struct {
	net.Listener
	onCopiers func() bool
}

func (l bulkListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		return bulkConn{tc, l.onCopiers}, nil
	}
	return c, nil
}

// bulkConn is a TCP connection whose ReadFrom, which net/http calls for a response body once
// the headers are out, sends a regular file in bounded sendfile calls.
type bulkConn struct {
	*net.TCPConn
	onCopiers func() bool
}

// ReadFrom sends r's bytes: a file behind an io.LimitedReader (what ServeContent hands down, in
// progressWriter's chunks; the handlers open only regular files) in bounded calls, anything
// else through the TCP connection as usual. Where sendfile cannot serve the pair at all, the
// connection's own ReadFrom does.
func (c bulkConn) ReadFrom(r io.Reader) (int64, error) {
	lr, ok := r.(*io.LimitedReader)
	if !ok {
		return c.TCPConn.ReadFrom(r)
	}
	f, ok := lr.R.(*os.File)
	if !ok {
		return c.TCPConn.ReadFrom(r)
	}
	n, err := sendBulk(c.TCPConn, f, lr, c.onCopiers)
	if n == 0 && unsupported(err) {
		return c.TCPConn.ReadFrom(lr)
	}
	return n, err
}

// unsupported is sendfile's answer for a pair of descriptors it cannot copy between.
func unsupported(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP)
}

// sendBulk copies up to lr.N bytes from f's current offset to dst with bounded sendfile calls,
// and counts them off lr.N. It keeps dst's write deadline: RawConn.Write waits for the socket to
// drain and fails when the deadline passes.
func sendBulk(dst *net.TCPConn, f *os.File, lr *io.LimitedReader, onCopiers func() bool) (written int64, err error) {
	dstConn, err := dst.SyscallConn()
	if err != nil {
		return 0, err
	}
	srcConn, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var sendErr error
	ctlErr := srcConn.Control(func(src uintptr) {
		err := dstConn.Write(func(dst uintptr) bool {
			var n int64
			n, sendErr = sendfile(int(dst), int(src), lr.N, onCopiers)
			written += n
			lr.N -= n
			return !errors.Is(sendErr, unix.EAGAIN) // false: wait until dst can take more
		})
		if err != nil && (sendErr == nil || errors.Is(sendErr, unix.EAGAIN)) {
			sendErr = err // the deadline passed while the socket was full
		}
	})
	if ctlErr != nil {
		return written, ctlErr
	}
	return written, sendErr
}

// sendfile sends up to limit bytes, one call after another, each on a copier while onCopiers says
// so, until limit is sent, the file ends or the socket is full (EAGAIN).
func sendfile(dst, src int, limit int64, onCopiers func() bool) (sent int64, err error) {
	for sent < limit {
		n, err := sendCall(dst, src, int(limit-sent), onCopiers())
		if n > 0 {
			sent += int64(n)
		}
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return sent, err
		case n == 0:
			return sent, nil // the file ended early
		}
	}
	return sent, nil
}

// sendCall runs one sendfile call in a slot: on a copier when lowered is true, else on the
// calling thread. Waiting for a slot is bounded like a stalled send (sendTimeout): should the
// disk under every call in flight hang, downloads fail with a timeout instead of piling up.
func sendCall(dst, src, count int, lowered bool) (int, error) {
	if err := takeSlot(); err != nil {
		return 0, err
	}
	defer func() { <-slots }()
	send := sendfileSyscall
	if lowered {
		send = onCopier
	}
	n, err := send(dst, src, nil, count)
	if err != nil {
		return n, os.NewSyscallError("sendfile", err)
	}
	return n, nil
}

// takeSlot waits up to sendTimeout for a free slot.
func takeSlot() error {
	select {
	case slots <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(sendTimeout)
	defer t.Stop()
	select {
	case slots <- struct{}{}:
		return nil
	case <-t.C:
		return os.ErrDeadlineExceeded
	}
}

// onCopier makes a sendfile call on a copier thread (offset: nil, the file's own).
func onCopier(dst, src int, _ *int64, count int) (int, error) {
	j := copyJob{dst: dst, src: src, count: count, done: make(chan copyResult, 1)}
	jobs() <- j
	r := <-j.done
	return r.n, r.err
}
