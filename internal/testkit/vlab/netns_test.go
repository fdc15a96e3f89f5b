package vlab

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNetnsDo: a socket made in Do lives in the namespace (it can bind an address only the
// namespace has), and the caller's thread and later goroutines stay in their own namespace.
func TestNetnsDo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (ip netns add); run it as root as CI does")
	}
	ctx := context.Background()
	name := "vlab-nstest-" + strings.ReplaceAll(t.Name(), "/", "-")
	if err := run(ctx, "ip", "netns", "add", name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run(ctx, "ip", "netns", "delete", name) })
	if err := run(ctx, "ip", "-n", name, "link", "set", "lo", "up"); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, "ip", "-n", name, "addr", "add", "10.250.0.1/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	own, _ := os.Readlink("/proc/thread-self/ns/net")
	var ln net.Listener
	if err := InNetns(name, func() error {
		var err error
		ln, err = net.Listen("tcp4", "10.250.0.1:0")
		return err
	}); err != nil {
		t.Fatalf("listen inside the namespace: %v", err)
	}
	defer ln.Close()
	if l, err := net.Listen("tcp4", "10.250.0.1:0"); err == nil {
		l.Close()
		t.Error("the caller could bind the namespace's address: it is in the namespace too")
	}
	if now, _ := os.Readlink("/proc/thread-self/ns/net"); now != own {
		t.Errorf("caller's thread namespace %s, was %s", now, own)
	}
	// The threads Do switched went back: after many calls, every thread of the process is in
	// the process's namespace again (a thread left inside would run other goroutines there).
	for range 50 {
		if err := InNetns(name, func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/ns/net")
	for _, task := range tasks {
		if ns, err := os.Readlink(task); err == nil && ns != own {
			t.Errorf("thread %s is in %s, not the process's %s", task, ns, own)
		}
	}
	if err := InNetns("vlab-no-such-namespace", func() error { return nil }); err == nil {
		t.Error("no error for a namespace that does not exist")
	}
}
