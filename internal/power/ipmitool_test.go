package power

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIPMIPasswordInEnvironment: bmclib hands the password to ipmitool in IPMITOOL_PASSWORD,
// never on its command line, which any local user reads in /proc/PID/cmdline (SECURITY.md, "A
// BMC password leaks"). ipmitool here is a stand-in that records how each run was called and
// answers as ipmitool does; nothing goes to the network. A bmclib upgrade that moved the password
// to -P would fail here.
func TestIPMIPasswordInEnvironment(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	// bmclib runs ipmitool with IPMITOOL_PASSWORD as its whole environment: builtins only.
	script := fmt.Sprintf(`#!/bin/sh
printf 'argv=%%s|password=%%s\n' "$*" "${IPMITOOL_PASSWORD-}" >> '%s'
case "$*" in
  *"chassis power status") echo "Chassis Power is off" ;;
  *"chassis power on") echo "Chassis Power Control: Up/On" ;;
  *) exit 1 ;;
esac
`, calls)
	if err := os.WriteFile(filepath.Join(dir, "ipmitool"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	const password = "s3cret-Pa55"
	target := Target{Node: "c1", BMC: &BMC{Protocol: MethodIPMI, Address: "192.0.2.1:6230", User: "admin", Password: password}}
	r := (&Switch{}).Do(context.Background(), On, []Target{target})[0]
	if r.Failed() || r.Done != "switched on" {
		t.Fatalf("power on through the stand-in ipmitool: %+v", r)
	}
	log, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	switched := false
	for _, l := range lines {
		argv, env, _ := strings.Cut(l, "|")
		if strings.Contains(argv, password) {
			t.Errorf("the password is on ipmitool's command line: %s", argv)
		}
		if env != "password="+password {
			t.Errorf("ipmitool's IPMITOOL_PASSWORD: %q, want the password", env)
		}
		if !strings.Contains(argv, "-U admin -E") || !strings.Contains(argv, "-H 192.0.2.1 -p 6230") {
			t.Errorf("ipmitool called as %q: want -U admin -E (password from the environment) and -H 192.0.2.1 -p 6230", argv)
		}
		switched = switched || strings.HasSuffix(argv, "chassis power on")
	}
	if !switched {
		t.Errorf("ipmitool was never asked to switch on:\n%s", log)
	}
	t.Logf("ipmitool runs for one `on` of a node that was off: %d\n%s", len(lines), log)
}
