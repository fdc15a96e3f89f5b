package bootd

import (
	"cmp"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/labcluster/gpucluster/internal/config"
)

// The warning names what to set, from a /proc/sys tree written for each case: the kernel takes
// the higher of conf/all and conf/IFACE.
func TestCheckReversePathFilter(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ifname     string // default lab0
		all, iface string // file contents; "" leaves the file out
		wantFix    string // "" for no warning (an info line)
		wantLevel  int    // the rp_filter field: the higher of the two
		wantError  string
	}{
		{name: "strict", all: "0\n", iface: "1\n", wantLevel: 1},
		{name: "strict everywhere", all: "1\n", iface: "0\n", wantLevel: 1},
		{name: "systemd default: loose interface", all: "0\n", iface: "2\n", wantLevel: 2, wantFix: "sysctl -w net.ipv4.conf.lab0.rp_filter=1 (and"},
		{name: "strict all, loose interface", all: "1\n", iface: "2\n", wantLevel: 2, wantFix: "sysctl -w net.ipv4.conf.lab0.rp_filter=1 (and"},
		{name: "off", all: "0\n", iface: "0\n", wantLevel: 0, wantFix: "sysctl -w net.ipv4.conf.lab0.rp_filter=1 (and"},
		{name: "loose all overrides a strict interface", all: "2\n", iface: "1\n", wantLevel: 2, wantFix: "sysctl -w net.ipv4.conf.all.rp_filter=0 (and"},
		{name: "both loose", all: "2\n", iface: "2\n", wantLevel: 2, wantFix: "sysctl -w net.ipv4.conf.lab0.rp_filter=1 net.ipv4.conf.all.rp_filter=0 (and"},
		{name: "a VLAN's name has a dot", ifname: "eth1.100", all: "0\n", iface: "2\n", wantLevel: 2, wantFix: "sysctl -w net/ipv4/conf/eth1.100/rp_filter=1 (and"},
		{name: "no such interface", all: "0\n", wantError: "lab0/rp_filter"},
		{name: "no conf/all", iface: "1\n", wantError: "all/rp_filter"},
		{name: "garbage", all: "0\n", iface: "strict\n", wantError: `lab0/rp_filter: strconv.Atoi: parsing "strict"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ifname := cmp.Or(tc.ifname, "lab0")
			procSys := t.TempDir()
			for name, content := range map[string]string{"all": tc.all, ifname: tc.iface} {
				if content == "" {
					continue
				}
				dir := filepath.Join(procSys, "net/ipv4/conf", name)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "rp_filter"), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			log, hook := test.NewNullLogger()
			d := &daemon{cfg: config.Config{Interface: ifname}, log: log}
			d.checkReversePathFilter(procSys)
			entries := hook.AllEntries()
			logLevel := logrus.WarnLevel
			if tc.wantFix == "" && tc.wantError == "" {
				logLevel = logrus.InfoLevel
			}
			if len(entries) != 1 || entries[0].Level != logLevel {
				t.Fatalf("logged %d entries, want one at %v", len(entries), logLevel)
			}
			e := entries[0]
			if level, _ := e.Data["rp_filter"].(int); tc.wantError == "" && level != tc.wantLevel {
				t.Errorf("rp_filter %d, want %d", level, tc.wantLevel)
			}
			if fix, _ := e.Data["fix"].(string); !strings.HasPrefix(fix, tc.wantFix) || (tc.wantFix == "") != (fix == "") {
				t.Errorf("fix %q, want it to start %q", fix, tc.wantFix)
			}
			if err, _ := e.Data[logrus.ErrorKey].(error); tc.wantError != "" && (err == nil || !strings.Contains(err.Error(), tc.wantError)) {
				t.Errorf("error %v, want one naming %q", err, tc.wantError)
			}
		})
	}
}

// The kernel's own tree has the layout reversePathFilter reads.
func TestReversePathFilterOfThisKernel(t *testing.T) {
	all, lo, err := reversePathFilter("/proc/sys", "lo")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{all, lo} {
		if v < 0 || v > 2 {
			t.Errorf("rp_filter %d, want 0, 1 or 2", v)
		}
	}
}
