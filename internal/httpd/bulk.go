package httpd

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// bulkNice is how much lower a file download's thread runs than the rest of bootd. In a boot
// storm on an appliance with few cores, the downloads (sendfile, and on a local bridge the
// receivers' TCP work, charged to the sender) would take the CPU that DHCP, TFTP and the boot
// scripts need to answer in time. A lower priority only matters while the CPU is short: a
// download still gets every cycle nothing else wants, so on an idle or link-bound server it
// runs as fast as before. Measured in `make bench` (BENCHMARKS.md): +4 made TFTP at N = 200 1.1
// to 2.1 times dnsmasq's (0.5 to 0.9 before) with HTTP still at or above nginx's; +10 cost HTTP
// and the time until all machines were done at N = 50; +2 helped TFTP less.
const bulkNice = 4

// asBulk runs send on an OS thread of its own whose nice is raised by bulkNice, then puts the
// thread back. Linux keeps nice per thread, so only this transfer yields. When the thread's
// priority cannot be restored (not allowed), the thread stays locked to this goroutine and Go
// ends it with the goroutine, so no lowered thread serves anything else.
func asBulk(send func()) {
	runtime.LockOSThread()
	if lowered(bulkNice, send) {
		runtime.UnlockOSThread()
	}
}

// lowered runs fn with the calling thread's nice raised by delta (at most 19), and reports
// whether the thread's nice is back to what it was. Where it cannot be changed, fn still runs.
// The caller has locked its OS thread.
func lowered(delta int, fn func()) (restored bool) {
	tid := unix.Gettid()
	before, err := niceOf(tid)
	if err != nil || unix.Setpriority(unix.PRIO_PROCESS, tid, min(before+delta, 19)) != nil {
		fn()
		return true
	}
	defer func() { restored = unix.Setpriority(unix.PRIO_PROCESS, tid, before) == nil }()
	fn()
	return
}

// niceOf is thread tid's nice value. The raw getpriority system call answers 20 - nice, so
// that no valid answer is negative.
func niceOf(tid int) (int, error) {
	p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	return 20 - p, err
}
