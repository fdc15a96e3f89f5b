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

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"

	"github.com/labcluster/gpucluster/internal/vlab"
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
	var wire *packet.Conn
	if err := n.Do(func() error {
		ifi, err := net.InterfaceByName("wire0")
		if err == nil {
			wire, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_ARP, nil)
		}
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
			if got := countProbes(t, wire); got != tc.want {
				t.Errorf("%d probes for %s on the wire, want %d", got, target, tc.want)
			}
		})
	}
}

// countProbes reads what reached the wire until it is quiet for 100 ms and counts the ARP
// probes for target.
func countProbes(t *testing.T, wire *packet.Conn) int {
	t.Helper()
	count := 0
	buf := make([]byte, 1500)
	for {
		if err := wire.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		n, _, err := wire.ReadFrom(buf)
		if err != nil {
			return count // quiet
		}
		if n >= 14 && isProbeFor(buf[14:n]) { // after the Ethernet header
			count++
		}
	}
}

// isProbeFor reports whether an ARP payload is a request with sender 0.0.0.0 for target.
func isProbeFor(b []byte) bool {
	t := target.As4()
	return len(b) >= 28 && b[7] == 1 && bytes.Equal(b[14:18], []byte{0, 0, 0, 0}) && bytes.Equal(b[24:28], t[:])
}
