package tftpd

import (
	"errors"
	"io"
	"net/netip"
	"sync"
	"time"
)

// A transfer holds a socket, a goroutine and an open file until its client finishes or stops
// answering (about 20 s: timeout and retries). Read requests are cheap to send, from any source
// port: without bounds a flood of them piles transfers up until the worker runs out of file
// descriptors, and then no machine gets its loader. Variables for tests.
var (
	// maxTransfers bounds the transfers running at once: a storm of a few hundred PCs runs one
	// each (a UEFI ROM's tsize probe ends before its download starts). Each holds two file
	// descriptors and some 20 KB.
	maxTransfers = 1024
	// maxPerClient bounds them per client address: a ROM runs one, two while it repeats a read
	// request our first answer crossed. One host flooding from many ports then cannot take the
	// slots of the others.
	maxPerClient = 4
	// maxTransferTime bounds one transfer: an iPXE binary of a megabyte takes well under a second
	// on a lab switch, and a client that acknowledges each block just before the timeout would
	// otherwise hold its transfer for half an hour.
	maxTransferTime = 2 * time.Minute
)

// errBusy is what a client over the bounds is told when it got past plainConn's check (which
// drops such requests unanswered) in a race with another. pin/tftp sends it as error 1, file not
// found, which ends a ROM's boot: the check is there so that this stays rare.
var errBusy = errors.New("server busy, try again")

// slots counts the transfers running, in all and per client address, against the bounds it was
// made with.
type slots struct {
	maxTotal, maxPer int

	mu       sync.Mutex
	total    int
	byClient map[netip.Addr]int
}

func newSlots() *slots {
	return &slots{maxTotal: maxTransfers, maxPer: maxPerClient, byClient: map[netip.Addr]int{}}
}

// full reports whether a transfer for client would now pass a bound.
func (s *slots) full(client netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fullLocked(client)
}

func (s *slots) fullLocked(client netip.Addr) bool {
	return s.total >= s.maxTotal || s.byClient[client] >= s.maxPer
}

// take claims a slot for client, or reports false when the worker or the client is at its bound.
// The caller gives a claimed slot back with release.
func (s *slots) take(client netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fullLocked(client) {
		return false
	}
	s.total++
	s.byClient[client]++
	return true
}

func (s *slots) release(client netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.byClient[client]--; s.byClient[client] <= 0 {
		delete(s.byClient, client) // the map holds running clients only
	}
}

// errTooSlow ends a transfer that outlived maxTransferTime.
var errTooSlow = errors.New("transfer took too long")

// deadlineReader fails reads after a deadline, which ends pin/tftp's transfer loop (it reads
// one block per acknowledged block).
type deadlineReader struct {
	r        io.Reader
	deadline time.Time
}

func (d deadlineReader) Read(p []byte) (int, error) {
	if time.Now().After(d.deadline) {
		return 0, errTooSlow
	}
	return d.r.Read(p)
}
