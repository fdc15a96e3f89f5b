//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// boots collects boot times of the same test image through each server, so one run can
// print bootd against the dnsmasq baseline measured on the same machine at the same time.
var boots = struct {
	sync.Mutex
	m map[string]map[string]time.Duration // firmware -> server -> time to address
}{m: map[string]map[string]time.Duration{}}

func recordBoot(server, firmware string, d time.Duration) {
	boots.Lock()
	defer boots.Unlock()
	if boots.m[firmware] == nil {
		boots.m[firmware] = map[string]time.Duration{}
	}
	boots.m[firmware][server] = d
}

func TestMain(m *testing.M) {
	code := m.Run()
	printBootComparison()
	os.Exit(code)
}

func printBootComparison() {
	boots.Lock()
	defer boots.Unlock()
	fws := make([]string, 0, len(boots.m))
	for fw := range boots.m {
		fws = append(fws, fw)
	}
	sort.Strings(fws)
	for _, fw := range fws {
		b, d := boots.m[fw]["bootd"], boots.m[fw]["dnsmasq"]
		if b == 0 || d == 0 {
			continue
		}
		fmt.Printf("boot time %s (power on to static address, TCG): bootd %s, dnsmasq %s, ratio %.2f\n", fw, b, d, b.Seconds()/d.Seconds())
	}
}

// newLab creates the lab vlab-<name>-<pid> with its bridge at addr, closed when the test ends
// (also when it fails).
func newLab(ctx context.Context, t *testing.T, name, addr string) *vlab.Lab {
	t.Helper()
	lab, err := vlab.New(ctx, fmt.Sprintf("vlab-%s-%d", name, os.Getpid()), netip.MustParsePrefix(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Error(err)
		}
	})
	return lab
}
