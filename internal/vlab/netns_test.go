package vlab

import (
	"context"
	"net"
	"os"
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
	if _, err := net.Listen("tcp4", "10.250.0.1:0"); err == nil {
		t.Error("the caller could bind the namespace's address: it is in the namespace too")
	}
	if now, _ := os.Readlink("/proc/thread-self/ns/net"); now != own {
		t.Errorf("caller's thread namespace %s, was %s", now, own)
	}
	if err := InNetns("vlab-no-such-namespace", func() error { return nil }); err == nil {
		t.Error("no error for a namespace that does not exist")
	}
}
