package bootd

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
)

// listen binds TFTP and HTTP before anything serves, and a port another program holds stops it
// with that program's port named and how to find it; nothing stays bound.
func TestListenNamesTakenPorts(t *testing.T) {
	free := func(t *testing.T, network string) int {
		t.Helper()
		if network == "udp4" {
			c, err := net.ListenPacket(network, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			return c.LocalAddr().(*net.UDPAddr).Port
		}
		l, err := net.Listen(network, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	tests := []struct {
		name  string
		taken string // "udp4" (the TFTP port), "tcp4" (HTTP) or ""
		want  string
	}{
		{"both free", "", ""},
		{"tftp port taken", "udp4", "tftp: listen udp4 127.0.0.1:%d: bind: address already in use (another program serves udp port %d: `ss -ulnp 'sport = :%d'`"},
		{"http port taken", "tcp4", "http: listen tcp4 127.0.0.1:%d: bind: address already in use (another program serves tcp port %d: `ss -tlnp 'sport = :%d'`"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := testDaemon(t)
			d.cfg.Interface, d.server = "lo", netip.MustParseAddr("127.0.0.1")
			d.cfg.Ports.TFTP, d.cfg.Ports.HTTP = free(t, "udp4"), free(t, "tcp4")
			port := 0
			switch tc.taken {
			case "udp4":
				port = d.cfg.Ports.TFTP
				c, err := net.ListenPacket("udp4", d.hostPort(port))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
			case "tcp4":
				port = d.cfg.Ports.HTTP
				l, err := net.Listen("tcp4", d.hostPort(port))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
			}
			conn, ln, err := d.listen(t.Context())
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				conn.Close()
				ln.Close()
				return
			}
			if want := fmt.Sprintf(tc.want, port, port, port); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %v, want one containing %q", err, want)
			}
			// Nothing stays bound: both ports can be bound again (the taken one once freed).
			if c, err := net.ListenPacket("udp4", d.hostPort(d.cfg.Ports.TFTP)); tc.taken != "udp4" {
				if err != nil {
					t.Errorf("the TFTP port stayed bound after the failure: %v", err)
				} else {
					c.Close()
				}
			}
		})
	}
}
