package dhcpd

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/labcluster/gpucluster/internal/ratelog"
)

// Garbage of every size up to the largest UDP datagram, truncated and absurd packets, sent to
// the real server: it keeps answering a good client.
func TestServeSurvivesGarbage(t *testing.T) {
	port := startServer(t, &fakeLeaser{})
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: loopback})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	to := &net.UDPAddr{IP: loopback, Port: port}
	good := packet(t, dhcpv4.MessageTypeDiscover, unknownMAC, pxeBIOS...).ToBytes()
	var pkts [][]byte
	for _, n := range []int{0, 1, 235, 236, 240, 241, 576, 1500, 4096, 4097, 65000} {
		p := make([]byte, n)
		_, _ = rand.Read(p)
		pkts = append(pkts, p)
	}
	for n := 0; n < len(good); n += 5 {
		pkts = append(pkts, good[:n])
	}
	// A real packet whose options run on past the end, and one padded to 65000 bytes.
	overrun := append(good[:len(good)-1:len(good)-1], 60, 255, 'P', 'X', 'E')
	pkts = append(pkts, overrun, append(good[:len(good):len(good)], make([]byte, 65000-len(good))...))
	for _, p := range pkts {
		if _, err := conn.WriteTo(p, to); err != nil {
			t.Fatalf("send %d bytes: %v", len(p), err)
		}
	}
	c, _ := newClient(t, nodeMAC, port)
	ctx, cancel := context.WithTimeout(context.Background(), loopbackTimeout)
	defer cancel()
	lease, err := c.Request(ctx)
	if err != nil {
		t.Fatalf("a good client after %d garbage packets: %v", len(pkts), err)
	}
	if got := addr(lease.ACK.YourIPAddr); got != nodeIP {
		t.Fatalf("ACK for %v, want %v", got, nodeIP)
	}
}

// A pool exhausted by a flood: one warning per interval, the rest at debug level with a count.
func TestLeaseErrorsAreRateLimited(t *testing.T) {
	log, hook := test.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	h := NewHandler(testOptions(), &fakeLeaser{err: errors.New("discovery pool exhausted")}, log)
	for i := range 1000 {
		mac := net.HardwareAddr{2, 0, 0, 0, byte(i >> 8), byte(i)}
		if h.Reply(packet(t, dhcpv4.MessageTypeDiscover, mac, pxeBIOS...)) != nil {
			t.Fatal("an answer without a lease")
		}
	}
	warnings := 0
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel {
			warnings++
		}
	}
	if warnings != 1 {
		t.Fatalf("%d warnings for 1000 failed leases within %s, want 1", warnings, ratelog.Every)
	}
}

// Lease errors held back when Serve stops are counted then, at their level: their window's timer
// would come too late.
func TestStopCountsHeldBackLeaseErrors(t *testing.T) {
	log, hook := test.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	h := NewHandler(testOptions(), &fakeLeaser{err: errors.New("discovery pool exhausted")}, log)
	port := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, "lo", port) }()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: loopback})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const sent = 5
	for i := range sent {
		mac := net.HardwareAddr{2, 0, 0, 0, 0, byte(i)}
		// Sent again until answered: the first ones may come before Serve listens.
		req := packet(t, dhcpv4.MessageTypeDiscover, mac, pxeBIOS...).ToBytes()
		for deadline := time.Now().Add(loopbackTimeout); lines(hook, "no lease for client") <= i; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("DISCOVER %d never reached the Leaser", i)
			}
			if _, err := conn.WriteTo(req, &net.UDPAddr{IP: loopback, Port: port}); err != nil {
				t.Fatal(err)
			}
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	n := lines(hook, "no lease for client")
	var counts []any
	for _, e := range hook.AllEntries() {
		if c, ok := e.Data["held_back"]; ok && e.Level == logrus.WarnLevel {
			counts = append(counts, c)
		}
	}
	if !slices.Equal(counts, []any{n - 1}) {
		t.Errorf("held_back counts of %d lease errors after the stop: %v, want [%d]", n, counts, n-1)
	}
}

// lines counts the entries with msg at any level, those held back at debug among them, and no
// count.
func lines(hook *test.Hook, msg string) int {
	n := 0
	for _, e := range hook.AllEntries() {
		if _, counted := e.Data["held_back"]; e.Message == msg && !counted {
			n++
		}
	}
	return n
}
