package vlab

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Netns is an open handle on a named network namespace (/run/netns/NAME, as `ip netns add` and
// AddHost make them), for creating sockets in it from this process without a process per
// namespace.
type Netns struct {
	Name string
	f    *os.File
}

// OpenNetns opens the namespace name.
func OpenNetns(name string) (*Netns, error) {
	f, err := os.Open("/run/netns/" + name)
	if err != nil {
		return nil, fmt.Errorf("open network namespace %s: %w", name, err)
	}
	return &Netns{Name: name, f: f}, nil
}

// Close releases the handle; the namespace stays.
func (n *Netns) Close() error { return n.f.Close() }

// Do runs fn on an OS thread switched into the namespace, and waits for it. Sockets fn creates
// belong to the namespace for their whole life, whichever goroutine uses them later, so only
// their creation has to happen inside fn (not in goroutines fn starts). fn runs on a goroutine of
// its own: a thread that cannot be switched back stays locked to it and ends with it, so it
// never runs other goroutines in the wrong namespace.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer own.Close()
		if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s: %w", n.Name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leave network namespace %s: %w", n.Name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// InNetns runs fn in the namespace name (Do), opening and closing it around the call.
func InNetns(name string, fn func() error) error {
	n, err := OpenNetns(name)
	if err != nil {
		return err
	}
	defer n.Close()
	return n.Do(fn)
}
