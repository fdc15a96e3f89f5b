package vcluster

import (
	"net/netip"
	"strings"
	"testing"
)

// tracking is `chronyc -n tracking` output with the given reference and leap status.
func tracking(ref string, stratum, leap string) string {
	return "Reference ID    : " + ref + "\nStratum         : " + stratum + "\n" +
		"Ref time (UTC)  : Sat Nov 21 14:05:22 2026\nSystem time     : 0.000001900 seconds slow of NTP time\n" +
		"Update interval : 2.0 seconds\nLeap status     : " + leap + "\n"
}

const sourcesHeader = "MS Name/IP address         Stratum Poll Reach LastRx Last sample               \n" +
	"===============================================================================\n"

// TestCheckFollows: only a node whose selected source and clock reference are the server, and
// which is synchronised, passes; a node serving its own clock or following another does not.
func TestCheckFollows(t *testing.T) {
	master := netip.MustParseAddr("10.80.0.100")
	for _, tt := range []struct {
		name, tracking, sources string
		want                    string // "" = follows; else part of the error
	}{
		{"follows the master",
			tracking("0A500064 (10.80.0.100)", "11", "Normal"),
			sourcesHeader + "^* 10.80.0.100                  10   6    17     5   -176ns[ -806ns] +/-   12us\n", ""},
		{"serves its own clock (the master itself)",
			tracking("7F7F0101 ()", "10", "Normal"), sourcesHeader, "selected source \"\""},
		{"follows another server",
			tracking("0A500005 (10.80.0.5)", "3", "Normal"),
			sourcesHeader + "^* 10.80.0.5                     2   6   377    12   +20us[ +22us] +/-   15ms\n^- 10.80.0.100                  10   6   377    11   -5us[  -5us] +/-   12us\n",
			"selected source \"10.80.0.5\""},
		{"not synchronised yet",
			tracking("00000000 ()", "0", "Not synchronised"),
			sourcesHeader + "^? 10.80.0.100                   0   6     0     -     +0ns[   +0ns] +/-    0ns\n", "selected source \"\""},
		{"selected, clock not yet updated",
			tracking("7F7F0101 ()", "10", "Normal"),
			sourcesHeader + "^* 10.80.0.100                  10   6     3     1   -176ns[ -806ns] +/-   12us\n", "reference ID 7F7F0101"},
		{"reference right, leap unsynchronised",
			tracking("0A500064 (10.80.0.100)", "11", "Not synchronised"),
			sourcesHeader + "^* 10.80.0.100                  10   6    17     5   -176ns[ -806ns] +/-   12us\n", "leap status"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := parseTracking(tt.tracking)
			if err != nil {
				t.Fatal(err)
			}
			err = checkFollows(tr, tt.sources, master)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("checkFollows: %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("checkFollows: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestParseTracking(t *testing.T) {
	tr, err := parseTracking(tracking("0A500064 (10.80.0.100)", "11", "Normal"))
	if want := (Tracking{RefID: "0A500064", RefName: "10.80.0.100", Stratum: 11, Leap: "Normal"}); err != nil || tr != want {
		t.Errorf("parseTracking = %+v, %v; want %+v", tr, err, want)
	}
	for _, bad := range []string{"", "506 Cannot talk to daemon\n", tracking("0A500064 (10.80.0.100)", "x", "Normal")} {
		if _, err := parseTracking(bad); err == nil {
			t.Errorf("parseTracking(%q) accepted", bad)
		}
	}
}

func TestRefID(t *testing.T) {
	if got := refID(netip.MustParseAddr("10.80.0.100")); got != "0A500064" {
		t.Errorf("refID = %s, want 0A500064", got)
	}
}

func TestParseClients(t *testing.T) {
	out := "Hostname                      NTP   Drop Int IntL Last     Cmd   Drop Int  Last\n" +
		"===============================================================================\n" +
		"10.80.0.101                     3      0   1   -     0       0      0   -     -\n" +
		"10.80.0.102                     0      0   -   -     -       2      0   -     5\n"
	got := parseClients(out)
	want := map[netip.Addr]int{netip.MustParseAddr("10.80.0.101"): 3, netip.MustParseAddr("10.80.0.102"): 0}
	if len(got) != len(want) {
		t.Fatalf("parseClients = %v, want %v", got, want)
	}
	for a, n := range want {
		if got[a] != n {
			t.Errorf("%s: %d NTP requests, want %d", a, got[a], n)
		}
	}
}
