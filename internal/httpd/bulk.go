package httpd

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// In a boot storm the image downloads would take the CPU that DHCP, TFTP and the boot scripts
// need to answer in time: on a few cores, with hundreds of downloads, the ACKs of machines still
// in DHCP waited seconds (BENCHMARKS.md, "What changed", item 13). Two measures, both only felt
// while the CPU is short:
//
//   - copySlots: at most one sendfile call per core at a time. Go takes the P from a goroutine
//     inside a system call and runs the next, so without a bound every download of the storm
//     sat in sendfile on a thread of its own, and the kernel shared the cores evenly between
//     those hundreds of threads and the one sending DHCP answers. More calls than cores copy no
//     faster; nginx, one event loop per core, never has more either.
//   - bulkNice: each sendfile call runs at nice +4, so a thread answering DHCP or a boot script
//     gets the core first. Only the system call runs lowered: lowering a download's thread for
//     the whole download (tried first) let the kernel preempt it while it ran Go code and held
//     one of the runtime's Ps, and the DHCP goroutines queued on that P waited with it. A thread
//     inside a system call holds no P that the runtime cannot take back.
//
// A download still gets every cycle nothing else wants, so on an idle or link-bound server it
// copies as fast as before. The values were measured in `make bench`: 4 and 8 slots on 2 cores
// left DHCP seconds late; nice +10 cost HTTP against nginx, +2 helped TFTP less.

// bulkNice is how much lower than the rest of bootd a download's sendfile calls run.
const bulkNice = 4

// copySlots bounds the sendfile calls in flight: one per core, at least two, so that one call
// waiting for the disk (an image not yet in the page cache) does not stop every download.
var copySlots = make(chan struct{}, max(runtime.NumCPU(), 2))

// CopySlots is how many downloads may be inside sendfile at once. Each holds a P of the Go
// runtime until the runtime takes it back (sysmon, every 20 µs to 10 ms, itself a thread that
// waits for a core): a server should have this many Ps beyond its usual ones, so that DHCP and
// the boot scripts never wait for one.
func CopySlots() int { return cap(copySlots) }

// cannotRestore is set once a thread's priority could not be put back (bootd not root and
// without CAP_SYS_NICE): later sendfile calls then run at normal priority rather than strand
// lowered threads.
var cannotRestore atomic.Bool

// sendfileSyscall is sendfile(2); a variable so that tests can look at the thread during the call.
var sendfileSyscall = unix.Sendfile

// bulkListener hands out connections whose file downloads are sent as bulk (sendBulk).
type bulkListener struct{ net.Listener }

func (l bulkListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		return bulkConn{tc}, nil
	}
	return c, err
}

// bulkConn is a TCP connection whose ReadFrom, which net/http calls for a response body once
// the headers are out, sends a regular file with sendBulk.
type bulkConn struct{ *net.TCPConn }

// ReadFrom sends r's bytes: a regular file behind an io.LimitedReader (what ServeContent and
// progressWriter hand down) with sendBulk, anything else through the TCP connection as usual.
func (c bulkConn) ReadFrom(r io.Reader) (int64, error) {
	lr, ok := r.(*io.LimitedReader)
	if !ok {
		return c.TCPConn.ReadFrom(r)
	}
	f, ok := lr.R.(*os.File)
	if !ok {
		return c.TCPConn.ReadFrom(r)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return c.TCPConn.ReadFrom(r)
	}
	return sendBulk(c.TCPConn, f, lr)
}

// sendBulk copies up to lr.N bytes from f's current offset to dst with sendfile, each call in a
// copy slot and at bulkNice, and counts them off lr.N. It keeps dst's write deadline:
// RawConn.Write waits for the socket to drain and fails when the deadline passes.
func sendBulk(dst *net.TCPConn, f *os.File, lr *io.LimitedReader) (written int64, err error) {
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
			n, sendErr = sendfile(int(dst), int(src), lr.N)
			written += n
			lr.N -= n
			return !errors.Is(sendErr, unix.EAGAIN) // false: wait until dst can take more
		})
		if err != nil && sendErr == nil {
			sendErr = err
		}
	})
	return written, errors.Join(ctlErr, sendErr)
}

// sendfile sends up to max bytes, calling sendfile(2) until max is sent, the file ends or the
// socket is full (EAGAIN); each call waits for a copy slot and runs at bulkNice.
func sendfile(dst, src int, max int64) (sent int64, err error) {
	for sent < max {
		slots := copySlots // a test may swap copySlots meanwhile: give back the slot taken
		slots <- struct{}{}
		n, err := lowered(func() (int, error) { return sendfileSyscall(dst, src, nil, int(min(max-sent, sendChunk))) })
		<-slots
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

// lowered runs call with the calling thread's nice raised by bulkNice, then puts it back. nice
// is per thread on Linux, so the goroutine stays on its thread meanwhile. Where the nice cannot
// be changed, call still runs. Where it cannot be put back, the thread stays locked to the
// goroutine, and Go ends it with the goroutine: no lowered thread serves anything else.
func lowered(call func() (int, error)) (int, error) {
	if cannotRestore.Load() {
		return call()
	}
	runtime.LockOSThread()
	tid := unix.Gettid()
	before, err := niceOf(tid)
	if err != nil || unix.Setpriority(unix.PRIO_PROCESS, tid, min(before+bulkNice, 19)) != nil {
		runtime.UnlockOSThread()
		return call()
	}
	n, err := call()
	if unix.Setpriority(unix.PRIO_PROCESS, tid, before) != nil {
		cannotRestore.Store(true)
		return n, err
	}
	runtime.UnlockOSThread()
	return n, err
}

// niceOf is thread tid's nice value. The raw getpriority system call answers 20 - nice, so that
// no valid answer is negative; x/sys returns it raw.
func niceOf(tid int) (int, error) {
	p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	return 20 - p, err
}
