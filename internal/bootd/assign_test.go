package bootd

import (
	"testing"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/inventory"
)

// TestAssignNamesTheReplacedMachine: an assign that moves a name to other hardware (--replace)
// answers and logs the MAC it replaced, the machine bootd forgets.
func TestAssignNamesTheReplacedMachine(t *testing.T) {
	const oldMAC, newMAC = "52:54:00:00:00:04", "52:54:00:00:00:14"
	for _, tt := range []struct {
		name     string
		req      ctl.AssignRequest
		replaced string // "" = none
	}{
		{"a free name", ctl.AssignRequest{Name: "c5", MAC: newMAC}, ""},
		{"the same machine again", ctl.AssignRequest{Name: "c4", MAC: oldMAC}, ""},
		{"replaced hardware", ctl.AssignRequest{Name: "c4", MAC: newMAC, Replace: true}, oldMAC},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := testDaemon(t)
			log, hook := logtest.NewNullLogger()
			d.log = log
			for _, mac := range []string{oldMAC, newMAC} {
				if _, _, err := d.inv.See(mac, inventory.Facts{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := (controller{d}).Assign(ctl.AssignRequest{Name: "c4", MAC: oldMAC}); err != nil {
				t.Fatal(err)
			}
			hook.Reset()
			a, err := controller{d}.Assign(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := replacedMAC(a); got != tt.replaced {
				t.Errorf("replaced %q, want %q", got, tt.replaced)
			}
			if e := hook.LastEntry(); e == nil || e.Message != "machine assigned" || e.Data["replaces"] != logged(tt.replaced) {
				t.Errorf("log %+v, want \"machine assigned\" with replaces=%q", e, tt.replaced)
			}
		})
	}
}

func replacedMAC(a inventory.Assignment) string {
	if a.Replaced == nil {
		return ""
	}
	return a.Replaced.MAC
}

// logged is the replaces field as logged: absent (nil) when nothing was replaced.
func logged(mac string) any {
	if mac == "" {
		return nil
	}
	return mac
}
