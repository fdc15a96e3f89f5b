package child

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/procstat"
)

// TestMain: run as `<test binary> parent`, the binary starts `sleep` through Command, prints its
// pid and waits to be killed.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "parent" {
		cmd := Command(context.Background(), "sleep", "1000")
		if err := cmd.Start(); err != nil {
			os.Exit(1)
		}
		os.Stdout.WriteString(strconv.Itoa(cmd.Process.Pid) + "\n")
		_ = cmd.Wait()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestChildDiesWithParent: SIGKILL the parent, and the child started with Command goes too.
func TestChildDiesWithParent(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(exe, "parent")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	n, _ := out.Read(buf)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		t.Fatalf("parent printed %q, not a pid", buf[:n])
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !procstat.Alive(pid) {
			return
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	t.Fatalf("child %d outlived its killed parent", pid)
}
