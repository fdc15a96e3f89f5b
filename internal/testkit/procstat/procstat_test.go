package procstat

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestReadSelf(t *testing.T) {
	var s Stat
	// Burn CPU until the kernel has accounted some of it (in ticks of 10 ms), for up to 5 s.
	for start := time.Now(); s.CPU == 0 && time.Since(start) < 5*time.Second; {
		var err error
		if s, err = Read(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	// The state is the main thread's, which may be in any state while this goroutine runs on
	// another.
	if s.State == "" || s.State == "Z" || s.PPid != os.Getppid() || s.PGrp <= 0 || s.CPU <= 0 {
		t.Errorf("own stat = %+v, want a live state, parent %d, a group and some CPU time", s, os.Getppid())
	}
}

// The command name may hold spaces and parentheses; the fields after it are counted from its last
// ')'. A line cut short or with a field that is no number is an error naming the field.
func TestParseStat(t *testing.T) {
	const rest = " S 100 7 7 0 -1 4194560 10 0 0 0 250 130 0 0 20 0 1 0 5 0 0"
	for _, tc := range []struct {
		name, line string
		want       Stat
		wantErr    string
	}{
		{"plain", "42 (bootd)" + rest, Stat{State: "S", PPid: 100, PGrp: 7, CPU: 3800 * time.Millisecond}, ""},
		{"spaces and parentheses in the name", "42 (a) (b c) )" + rest, Stat{State: "S", PPid: 100, PGrp: 7, CPU: 3800 * time.Millisecond}, ""},
		{"zombie", "42 (sh) Z 1 42 42 0 -1 4227084 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0", Stat{State: "Z", PPid: 1, PGrp: 42}, ""},
		{"no name", "42 bootd S 100", Stat{}, "no command name"},
		{"cut short", "42 (bootd) S 100 7 7 0", Stat{}, "5 fields after the command name, want 13 or more"},
		{"not a number", "42 (bootd) S 100 7 7 0 -1 4194560 10 0 0 0 x 130", Stat{}, "field 14: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.line + "\n"))
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one starting %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestAlive: a child is alive while it runs, gone as a zombie (exited, not yet waited for) and
// gone once reaped.
func TestAlive(t *testing.T) {
	cmd := exec.Command("sh", "-c", "read _") // exits when its stdin closes
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !Alive(pid) {
		t.Fatal("a running child is not alive")
	}
	stdin.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s, err := Read(pid)
		if err != nil {
			t.Fatal(err)
		}
		if s.State == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child did not exit: %+v", s)
		}
	}
	if Alive(pid) {
		t.Error("a zombie counts as alive")
	}
	_ = cmd.Wait()
	if Alive(pid) {
		t.Error("a reaped child counts as alive")
	}
}

func TestStatus(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"Pid", strconv.Itoa(os.Getpid())},
		{"NoSuchKey", ""},
	} {
		t.Run(tc.key, func(t *testing.T) {
			if got, err := Status(os.Getpid(), tc.key); got != tc.want || err != nil {
				t.Errorf("Status(self, %s) = %q, %v; want %q", tc.key, got, err, tc.want)
			}
		})
	}
	if _, err := Status(-1, "Pid"); err == nil {
		t.Error("Status of no process: no error")
	}
}
