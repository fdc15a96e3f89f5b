package procstat

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestReadSelf(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) { // burn some CPU time to read back
	}
	s, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The state is the main thread's, which may sleep while this goroutine runs on another.
	if (s.State != "R" && s.State != "S") || s.PPid != os.Getppid() || s.PGrp <= 0 || s.CPU < 10*time.Millisecond {
		t.Errorf("own stat = %+v, want running or sleeping, parent %d, a group and at least 10ms of CPU", s, os.Getppid())
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
