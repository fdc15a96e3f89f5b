package arpprobe

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// TestProbesSent counts on the wire what each probe sends for one silent address: Reprobe one
// request, Probe and Sweep two (resendFactor), each an RFC 5227 probe for the address.
func TestProbesSent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (a network namespace and raw sockets); run it as root as CI does")
	}
	ns := "arpprobe-test"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", ns).Run() })
	ip("-n", ns, "link", "add", "probe0", "type", "veth", "peer", "name", "wire0")
	ip("-n", ns, "link", "set", "probe0", "up")
	ip("-n", ns, "link", "set", "wire0", "up")
	n, err := vlab.OpenNetns(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// wire0 reads with the prober's own kind of socket, without Ethernet headers.
	var wire *os.File
	var probeMAC net.HardwareAddr
	if err := n.Do(func() error {
		ifi, err := net.InterfaceByName("wire0")
		if err != nil {
			return err
		}
		probe0, err := net.InterfaceByName("probe0")
		if err != nil {
			return err
		}
		probeMAC = probe0.HardwareAddr
		wire, err = open(ifi.Index)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer wire.Close()
	p := New("probe0")
	for _, tc := range []struct {
		name  string
		probe func(ctx context.Context) error
		want  int
	}{
		{"Reprobe", func(ctx context.Context) error { _, err := p.Reprobe(ctx, target, 50*time.Millisecond); return err }, 1},
		{"Probe", func(ctx context.Context) error { _, err := p.Probe(ctx, target, 50*time.Millisecond); return err }, resendFactor},
		{"Sweep", func(ctx context.Context) error {
			_, err := p.Sweep(ctx, []netip.Addr{target}, 50*time.Millisecond)
			return err
		}, resendFactor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The prober's socket is made on first use: inside the namespace.
			if err := n.Do(func() error { return tc.probe(context.Background()) }); err != nil {
				t.Fatal(err)
			}
			if got := countProbes(t, wire, Request(probeMAC, target)); got != tc.want {
				t.Errorf("%d probes for %s on the wire, want %d", got, target, tc.want)
			}
		})
	}
}

// countProbes reads what reached the wire until it is quiet for 100 ms and counts the packets
// that are probe (padding aside).
func countProbes(t *testing.T, wire *os.File, probe []byte) int {
	t.Helper()
	count := 0
	buf := make([]byte, 1500)
	for {
		if err := wire.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		n, err := wire.Read(buf)
		if err != nil {
			return count // quiet
		}
		if n >= len(probe) && bytes.Equal(buf[:len(probe)], probe) { // a link may pad the frame
			count++
		}
	}
}
