package vbmc

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// here runs programs in the test's own namespace, on loopback.
type here struct{ t *testing.T }

func (h here) Start(ctx context.Context, logPath, name string, args ...string) (*vlab.Process, error) {
	lab := &vlab.Lab{} // an unnamed lab tracks nothing but the process; closed below
	h.t.Cleanup(func() { _ = lab.Close() })
	return lab.StartHere(ctx, logPath, name, args...)
}

func (here) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, name, args...)
}

// freeUDPPort finds a loopback port nobody uses now.
func freeUDPPort(t *testing.T) uint16 {
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}

// TestBMC: ipmi_sim answers ipmitool with the right password only, and the chassis script
// keeps what ipmitool switched; Watch follows it.
func TestBMC(t *testing.T) {
	for _, tool := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (Debian: openipmi, ipmitool; scripts/setup-debian.sh installs them)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), freeUDPPort(t))
	b, err := Start(ctx, here{t}, Config{Name: "c1", Dir: t.TempDir(), Addr: addr, User: "admin", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan bool, 4)
	go b.Watch(ctx, func(on bool) { changes <- on })
	if out, err := b.Ipmitool(ctx, "chassis", "power", "on"); err != nil {
		t.Fatalf("power on: %v %s", err, out)
	}
	select {
	case on := <-changes:
		if !on {
			t.Fatal("Watch saw off after power on")
		}
	case <-ctx.Done():
		t.Fatal("Watch saw no change")
	}
	if on, err := b.Power(); !on || err != nil {
		t.Fatalf("Power() = %v, %v after power on", on, err)
	}
	if out, err := b.Ipmitool(ctx, "chassis", "power", "status"); err != nil || !strings.Contains(string(out), "is on") {
		t.Fatalf("status: %v %s", err, out)
	}
	if got := b.Sets(); !slices.Equal(got, []string{"set power 1"}) {
		t.Fatalf("Sets() = %q", got)
	}
	wrong := *b
	wrong.cfg.Password = "wrong"
	if out, err := wrong.Ipmitool(ctx, "chassis", "power", "off"); err == nil {
		t.Fatalf("a wrong password switched it off: %s", out)
	}
	if on, _ := b.Power(); !on {
		t.Fatal("off after a refused request")
	}
}
