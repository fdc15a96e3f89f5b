package inventory

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// crashChildEnv makes the test binary act as a writer that the parent kills with SIGKILL.
const crashChildEnv = "INVENTORY_CRASH_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path)
		return
	}
	os.Exit(m.Run())
}

// crashChild assigns nodes and leases addresses forever, printing each one once it is durable.
func crashChild(path string) {
	s, err := Open(path)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	nodes, _ := s.Snapshot()
	pool := Pool{Start: netip.MustParseAddr("10.80.1.0"), End: netip.MustParseAddr("10.80.1.250"), LeaseTime: time.Hour}
	for i := len(nodes) + 1; ; i++ {
		mac := fmt.Sprintf("52:54:00:00:%02x:%02x", i/256, i%256)
		if _, _, err := s.See(mac, Facts{Serial: "S"}); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		name := fmt.Sprintf("c%d", i)
		if _, err := s.Assign(AssignRequest{Name: name, Role: "compute", Address: netip.AddrFrom4([4]byte{10, 80, byte(i / 250), byte(i % 250)}), MAC: mac}); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("node", name, mac)
		lmac := fmt.Sprintf("52:54:00:01:%02x:%02x", i/256, i%256)
		if _, err := dora(s, lmac, pool); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("lease", lmac)
	}
}

func TestSIGKILLLosesNothingAcknowledged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.json")
	acked := map[string]bool{}
	for round := range 15 {
		killChildAfter(t, path, 3+round%7, acked)
		s, err := Open(path)
		if err != nil {
			t.Fatalf("round %d: state does not load after SIGKILL: %v", round, err)
		}
		checkDurable(t, s, acked)
	}
}

// killChildAfter runs the writer, kills it with SIGKILL once it acknowledged n writes, and
// records every acknowledged write.
func killChildAfter(t *testing.T, path string, n int, acked map[string]bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for seen := 0; seen < n && sc.Scan(); seen++ {
		line := sc.Text()
		if strings.HasPrefix(line, "error") {
			t.Fatalf("writer failed: %s", line)
		}
		acked[line] = true
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

func checkDurable(t *testing.T, s *Store, acked map[string]bool) {
	t.Helper()
	nodes, _ := s.Snapshot()
	names, addrs := map[string]string{}, map[netip.Addr]bool{}
	for _, n := range nodes {
		if names[n.Name] != "" || addrs[n.Address] {
			t.Fatalf("duplicate node name or address: %+v", n)
		}
		names[n.Name], addrs[n.Address] = n.MAC, true
	}
	leases := map[string]bool{}
	for _, l := range s.Leases() {
		leases[l.MAC] = true
	}
	for line := range acked {
		f := strings.Fields(line)
		switch {
		case f[0] == "node" && names[f[1]] != f[2]:
			t.Errorf("acknowledged %s lost after SIGKILL", line)
		case f[0] == "lease" && !leases[f[1]]:
			t.Errorf("acknowledged %s lost after SIGKILL", line)
		}
	}
}
