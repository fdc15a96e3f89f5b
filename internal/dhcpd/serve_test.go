package dhcpd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
)

// The loopback tests run the real Serve (0.0.0.0:port with SO_BINDTODEVICE "lo") and a real
// nclient4 client on 127.0.0.1. Two tricks keep every packet on loopback:
//   - the client unicasts to 127.0.0.1:port (nclient4.WithServerAddr) instead of broadcasting,
//     so its source address is 127.0.0.1 and server4 answers by unicast to it rather than to
//     255.255.255.255 (the broadcast path is server4's, and the vlab e2e suite covers it);
//   - "lo" has no hardware address, so the client gets a made-up MAC, which nclient4 puts in
//     chaddr and matches against the replies.
// nclient4.Release would send to the server identifier (10.80.0.1): the test sends the RELEASE
// to 127.0.0.1 itself.

const loopbackTimeout = 5 * time.Second

var loopback = net.IPv4(127, 0, 0, 1)

func TestServeDORA(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mac      net.HardwareAddr
		mods     []dhcpv4.Modifier
		ip       netip.Addr
		hostname string
		bootFile string
	}{
		{"discovery lease for a pxe bios client", unknownMAC, pxeBIOS, poolIP, "", "undionly.kpxe"},
		{"reservation for an assigned node", nodeMAC, nil, nodeIP, "c1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fl := &fakeLeaser{}
			port := startServer(t, fl)
			c, conn := newClient(t, tc.mac, port)

			ctx, cancel := context.WithTimeout(context.Background(), loopbackTimeout)
			defer cancel()
			lease, err := c.Request(ctx, tc.mods...)
			if err != nil {
				t.Fatalf("DORA: %v", err)
			}
			for _, p := range []*dhcpv4.DHCPv4{lease.Offer, lease.ACK} {
				if got := addr(p.YourIPAddr); got != tc.ip {
					t.Errorf("%s yiaddr = %v, want %v", p.MessageType(), got, tc.ip)
				}
				if p.HostName() != tc.hostname || p.BootFileName != tc.bootFile {
					t.Errorf("%s hostname, boot file = %q, %q; want %q, %q",
						p.MessageType(), p.HostName(), p.BootFileName, tc.hostname, tc.bootFile)
				}
			}
			release(t, conn, lease.ACK, port)
			waitRelease(t, fl, releaseCall{tc.mac.String(), tc.ip, false})
		})
	}
}

// startServer runs Serve on lo and returns its port; the server stops when the test ends.
func startServer(t *testing.T, leaser Leaser) int {
	t.Helper()
	return startServerWith(t, leaser, testOptions())
}

func startServerWith(t *testing.T, leaser Leaser, opts Options) int {
	t.Helper()
	port := freePort(t)
	h := NewHandler(opts, leaser, quietLog())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, "lo", port) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(loopbackTimeout):
			t.Error("Serve did not return after cancel")
		}
	})
	return port
}

// freePort asks the kernel for a free UDP port. Serve binds it a moment later; the client
// retries until it answers, so the gap costs at most a retry.
func freePort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// newClient is an nclient4 client with a made-up MAC on 127.0.0.1, unicasting to the server.
func newClient(t *testing.T, mac net.HardwareAddr, port int, opts ...nclient4.ClientOpt) (*nclient4.Client, net.PacketConn) {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: loopback})
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]nclient4.ClientOpt{
		nclient4.WithServerAddr(&net.UDPAddr{IP: loopback, Port: port}),
		nclient4.WithTimeout(100 * time.Millisecond), nclient4.WithRetry(5),
	}, opts...)
	c, err := nclient4.NewWithConn(conn, mac, opts...)
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, conn
}

func release(t *testing.T, conn net.PacketConn, ack *dhcpv4.DHCPv4, port int) {
	t.Helper()
	rel, err := dhcpv4.NewReleaseFromACK(ack)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.WriteTo(rel.ToBytes(), &net.UDPAddr{IP: loopback, Port: port}); err != nil {
		t.Fatal(err)
	}
}

// waitRelease polls until fl has seen want; RELEASE has no answer to wait for.
func waitRelease(t *testing.T, fl *fakeLeaser, want releaseCall) {
	t.Helper()
	deadline := time.Now().Add(loopbackTimeout)
	for time.Now().Before(deadline) {
		if slices.Contains(fl.releases(), want) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("Release calls = %v, want %v", fl.releases(), want)
}

func TestServeSilentForUnknownNonPXE(t *testing.T) {
	port := startServer(t, &fakeLeaser{})
	ctx, cancel := context.WithTimeout(context.Background(), loopbackTimeout)
	defer cancel()
	// First prove the server answers, so that silence below is the handler's choice.
	node, _ := newClient(t, nodeMAC, port)
	if _, err := node.DiscoverOffer(ctx); err != nil {
		t.Fatalf("assigned node: %v", err)
	}
	c, _ := newClient(t, unknownMAC, port, nclient4.WithTimeout(300*time.Millisecond), nclient4.WithRetry(1))
	if _, err := c.DiscoverOffer(ctx); !errors.Is(err, nclient4.ErrNoResponse) {
		t.Fatalf("DiscoverOffer error = %v, want no response", err)
	}
}

func TestServeBadInterface(t *testing.T) {
	h := NewHandler(testOptions(), &fakeLeaser{}, quietLog())
	ctx, cancel := context.WithTimeout(context.Background(), loopbackTimeout)
	defer cancel()
	if err := h.Serve(ctx, "nosuchif0", 0); err == nil {
		t.Fatal("Serve on a missing interface succeeded")
	}
}

// blockingLeaser holds each Lease call until release is closed.
type blockingLeaser struct {
	fakeLeaser
	called  chan struct{}
	release chan struct{}
}

func (b *blockingLeaser) Lease(mac net.HardwareAddr, pxe, bind bool) (Lease, bool, error) {
	select { // retransmissions (the client asks until the server has bound its port) pass
	case b.called <- struct{}{}:
	default:
	}
	<-b.release
	return b.fakeLeaser.Lease(mac, pxe, bind)
}

// Serve returns only once the packets it was answering are done: bootd compacts the inventory
// right after, which must see their leases.
func TestServeWaitsForPacketsInFlight(t *testing.T) {
	port := freePort(t)
	bl := &blockingLeaser{called: make(chan struct{}, 1), release: make(chan struct{})}
	h := NewHandler(testOptions(), bl, quietLog())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, "lo", port) }()
	c, _ := newClient(t, nodeMAC, port, nclient4.WithTimeout(2*time.Second), nclient4.WithRetry(3))
	offered := make(chan error, 1)
	go func() {
		_, err := c.DiscoverOffer(context.Background())
		offered <- err
	}()
	select {
	case <-bl.called:
	case <-time.After(loopbackTimeout):
		t.Fatal("the DISCOVER never reached the Leaser")
	}
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Serve returned (%v) while a packet was still being answered", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(bl.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(loopbackTimeout):
		t.Fatal("Serve did not return once the packet in flight was answered")
	}
	if err := <-offered; err != nil {
		t.Fatalf("the DISCOVER in flight at the stop got no OFFER: %v", err)
	}
}

// countingMeter records what Serve counts.
type countingMeter struct {
	mu        sync.Mutex
	exchanges map[string]int // "request reply"
	errors    map[string]int
}

func (m *countingMeter) DHCPExchange(request, reply string, took time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if took < 0 {
		reply += " (negative time)"
	}
	m.exchanges[request+" "+reply]++
}

func (m *countingMeter) DHCPError(kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errors[kind]++
}

func (m *countingMeter) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprint(m.exchanges, m.errors)
}

// TestServeCounts checks what Serve tells its Meter: each request with its reply, silence as
// "none", and a Leaser's failure as an error.
func TestServeCounts(t *testing.T) {
	m := &countingMeter{exchanges: map[string]int{}, errors: map[string]int{}}
	opts := testOptions()
	opts.Meter = m
	fl := &fakeLeaser{}
	port := startServerWith(t, fl, opts)
	ctx, cancel := context.WithTimeout(context.Background(), loopbackTimeout)
	defer cancel()
	c, conn := newClient(t, unknownMAC, port)
	lease, err := c.Request(ctx, pxeBIOS...)
	if err != nil {
		t.Fatal(err)
	}
	release(t, conn, lease.ACK, port)
	waitRelease(t, fl, releaseCall{unknownMAC.String(), poolIP, false})
	silent, _ := newClient(t, unknownMAC, port, nclient4.WithTimeout(300*time.Millisecond), nclient4.WithRetry(1))
	if _, err := silent.DiscoverOffer(ctx); !errors.Is(err, nclient4.ErrNoResponse) {
		t.Fatalf("non-PXE client answered: %v", err)
	}
	fl.mu.Lock()
	fl.err = errors.New("disk full")
	fl.mu.Unlock()
	if _, err := silent.DiscoverOffer(ctx, pxeBIOS...); !errors.Is(err, nclient4.ErrNoResponse) {
		t.Fatalf("client answered while the leaser fails: %v", err)
	}
	want := "map[discover none:2 discover offer:1 release none:1 request ack:1] map[lease:1]"
	for deadline := time.Now().Add(loopbackTimeout); m.String() != want && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if got := m.String(); got != want {
		t.Errorf("counted %s, want %s", got, want)
	}
}
