package power

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
)

// fakeBMC is a BMC's power as a board holds it: tests of the actions' logic (status first, no
// cycle of a node that is off). The real protocols are tested against OpenIPMI's ipmi_sim in
// e2e/power_test.go.
type fakeBMC struct {
	mu    sync.Mutex
	on    bool
	calls []string
	fail  error
}

func (f *fakeBMC) PowerState(context.Context) (State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "status")
	if f.fail != nil {
		return StateUnknown, f.fail
	}
	if f.on {
		return StateOn, nil
	}
	return StateOff, nil
}

func (f *fakeBMC) SetPower(_ context.Context, state string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, state)
	if state == "cycle" && !f.on {
		return errors.New("cycle refused: off")
	}
	f.on = state != "off"
	return nil
}

func (f *fakeBMC) Close(context.Context) {}

func TestDo(t *testing.T) {
	mac := net.HardwareAddr{0x52, 0x54, 0, 0, 0, 3}
	tests := []struct {
		name      string
		action    Action
		on        bool
		noBMC     bool
		fail      error
		wantState State
		wantCalls string
		wantDone  string
		wantErr   string
		wantWoken bool
	}{
		{"status", Status, true, false, nil, StateOn, "status", "", "", false},
		{"on", On, false, false, nil, StateOn, "status on status", "switched on", "", false},
		{"on when on", On, true, false, nil, StateOn, "status", "was on already", "", false},
		{"off", Off, true, false, nil, StateOff, "status off status", "switched off", "", false},
		{"cycle", Cycle, true, false, nil, StateOn, "status cycle status", "power cycled", "", false},
		{"cycle when off switches on", Cycle, false, false, nil, StateOn, "status on status", "switched on", "", false},
		{"BMC does not answer", On, false, false, errors.New("timeout"), StateUnknown, "status", "", "ipmi BMC at 10.80.1.3: power status: timeout", false},
		{"wake-on-lan on", On, false, true, nil, StateUnknown, "", "magic packet sent to 52:54:00:00:00:03", "", true},
		{"wake-on-lan status", Status, false, true, nil, StateUnknown, "", "no BMC to ask", "", false},
		{"wake-on-lan off", Off, false, true, nil, StateUnknown, "", "", "c3 has no BMC ([bmc.c3] in bootd's config)", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			board := &fakeBMC{on: tt.on, fail: tt.fail}
			var woken []string
			s := &Switch{Interface: "lab0",
				Wake: func(ifname string, m net.HardwareAddr) error {
					woken = append(woken, ifname+" "+m.String())
					return nil
				},
				OpenBMC: func(context.Context, BMC) (Controller, error) { return board, nil }}
			target := Target{Node: "c3", MAC: mac, BMC: &BMC{Protocol: MethodIPMI, Address: "10.80.1.3", User: "ADMIN", Password: "pw"}}
			if tt.noBMC {
				target.BMC = nil
			}
			r := s.Do(context.Background(), tt.action, []Target{target})[0]
			if r.State != tt.wantState || r.Done != tt.wantDone || !strings.Contains(r.Error, tt.wantErr) || (tt.wantErr == "") != (r.Error == "") {
				t.Errorf("result %+v, want state %s, done %q, error %q", r, tt.wantState, tt.wantDone, tt.wantErr)
			}
			if got := strings.Join(board.calls, " "); got != tt.wantCalls {
				t.Errorf("BMC saw %q, want %q", got, tt.wantCalls)
			}
			if tt.wantWoken != (len(woken) == 1 && woken[0] == "lab0 52:54:00:00:00:03") {
				t.Errorf("woken %q", woken)
			}
		})
	}
}

func TestDoKeepsOrderAndReportsTargetErrors(t *testing.T) {
	s := &Switch{Wake: func(string, net.HardwareAddr) error { return nil },
		OpenBMC: func(context.Context, BMC) (Controller, error) { return &fakeBMC{on: true}, nil }}
	var targets []Target
	for _, n := range []string{"c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10"} {
		targets = append(targets, Target{Node: n, BMC: &BMC{Protocol: MethodRedfish, Address: n + "-bmc"}})
	}
	targets[4].Err = errors.New("no BMC password for c5")
	rs := s.Do(context.Background(), Status, targets)
	for i, r := range rs {
		if r.Node != targets[i].Node || r.Method != MethodRedfish || r.BMC != targets[i].Node+"-bmc" {
			t.Fatalf("result %d: %+v", i, r)
		}
		if (i == 4) != r.Failed() {
			t.Errorf("result %d failed %v: %+v", i, r.Failed(), r)
		}
	}
}

func TestNormalise(t *testing.T) {
	for in, want := range map[string]State{"Chassis Power is on\n": StateOn, "Chassis Power is off": StateOff,
		"On": StateOn, "Off": StateOff, "PoweringOn": "poweringon", "": StateUnknown} {
		if got := normalise(in); got != want {
			t.Errorf("normalise(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMagicPacket(t *testing.T) {
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0xc1, 0x00, 0x02}
	p := MagicPacket(mac)
	if len(p) != 102 || !bytes.Equal(p[:6], bytes.Repeat([]byte{0xff}, 6)) {
		t.Fatalf("packet % x", p)
	}
	for i := 0; i < 16; i++ {
		if !bytes.Equal(p[6+6*i:12+6*i], mac) {
			t.Fatalf("copy %d of the MAC: % x", i, p[6+6*i:12+6*i])
		}
	}
}

func TestSecretRedacted(t *testing.T) {
	b := BMC{Protocol: MethodIPMI, Address: "x", User: "ADMIN", Password: "hunter2"}
	for _, s := range []string{Secret("hunter2").String(), Target{BMC: &b}.Method(), fmtAll(b)} {
		if strings.Contains(s, "hunter2") {
			t.Fatalf("printed %q", s)
		}
	}
}

func TestParseAction(t *testing.T) {
	for _, s := range []string{"on", "off", "cycle", "status"} {
		if a, err := ParseAction(s); err != nil || string(a) != s {
			t.Errorf("ParseAction(%q) = %q, %v", s, a, err)
		}
	}
	if _, err := ParseAction("reboot"); err == nil || !strings.Contains(err.Error(), "on, off, cycle or status") {
		t.Errorf("ParseAction(reboot): %v", err)
	}
}

func fmtAll(v any) string { return fmt.Sprintf("%v %+v %#v %s", v, v, v, v) }
