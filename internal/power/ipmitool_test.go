package power

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// standInIPMItool puts on PATH an ipmitool that records each run's arguments and
// IPMITOOL_PASSWORD in dir/calls and answers as ipmitool does: a node that is off, switched on
// when asked; a password other than want refused as a BMC refuses it. Nothing goes to the network.
func standInIPMItool(t *testing.T, want string) (calls string) {
	t.Helper()
	dir := t.TempDir()
	calls = filepath.Join(dir, "calls")
	// bmclib runs ipmitool with IPMITOOL_PASSWORD as its whole environment: builtins only.
	script := fmt.Sprintf(`#!/bin/sh
printf 'argv=%%s|password=%%s\n' "$*" "${IPMITOOL_PASSWORD-}" >> '%s'
if [ "${IPMITOOL_PASSWORD-}" != '%s' ]; then
  echo "Error: Unable to establish IPMI v2 / RMCP+ session" >&2
  exit 1
fi
case "$*" in
  *"chassis power status") echo "Chassis Power is off" ;;
  *"chassis power on") echo "Chassis Power Control: Up/On" ;;
  *) exit 1 ;;
esac
`, calls, want)
	if err := os.WriteFile(filepath.Join(dir, "ipmitool"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	return calls
}

// TestIPMItool: bmclib hands the password to ipmitool in IPMITOOL_PASSWORD, never on its command
// line, which any local user reads in /proc/PID/cmdline (SECURITY.md, "A BMC password leaks"): a
// bmclib upgrade that passed -P would fail here. A wrong password is the node's failure, saying
// bootd cannot log in, and leaves no password in the error. A status is one ipmitool run.
func TestIPMItool(t *testing.T) {
	const password = "s3cret-Pa55"
	tests := []struct {
		name     string
		action   Action
		password Secret
		wantDone string
		wantErr  string
		wantRuns []string // each run's command, in order
	}{
		{"status", Status, password, "", "", []string{"chassis power status"}},
		// bootd's status before, bmclib's ipmitool provider's two IsOn checks, the switch, bootd's
		// status after.
		{"on", On, password, "switched on", "", []string{"chassis power status", "chassis power status",
			"chassis power status", "chassis power on", "chassis power status"}},
		// bmclib tries cipher suite 3, then 17.
		{"a wrong password", Status, "a-guess", "", "cannot log in", []string{"chassis power status", "chassis power status"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := standInIPMItool(t, password)
			target := Target{Node: "c1", BMC: &BMC{Protocol: MethodIPMI, Address: "192.0.2.1:6230", User: "admin", Password: tt.password}}
			r := (&Switch{}).Do(context.Background(), tt.action, []Target{target})[0]
			if r.Done != tt.wantDone || !strings.Contains(r.Error, tt.wantErr) || (tt.wantErr == "") != (r.Error == "") {
				t.Errorf("%s: %+v, want done %q, error with %q", tt.action, r, tt.wantDone, tt.wantErr)
			}
			if strings.Contains(r.Error, string(tt.password)) {
				t.Errorf("the error holds the password: %s", r.Error)
			}
			log, err := os.ReadFile(calls)
			if err != nil {
				t.Fatal(err)
			}
			var runs []string
			for _, l := range strings.Split(strings.TrimSpace(string(log)), "\n") {
				argv, env, _ := strings.Cut(l, "|")
				if strings.Contains(argv, string(tt.password)) {
					t.Errorf("the password is on ipmitool's command line: %s", argv)
				}
				if env != "password="+string(tt.password) {
					t.Errorf("ipmitool's IPMITOOL_PASSWORD: %q, want the password", env)
				}
				const prefix = "argv=-I lanplus -U admin -E -N 5 -H 192.0.2.1 -p 6230 -C "
				if !strings.HasPrefix(argv, prefix) {
					t.Errorf("ipmitool called as %q, want %q (-E: the password from the environment) and a cipher suite", argv, prefix)
				}
				runs = append(runs, strings.Join(strings.Fields(argv)[13:], " "))
			}
			if strings.Join(runs, ", ") != strings.Join(tt.wantRuns, ", ") {
				t.Errorf("ipmitool runs: %q, want %q", runs, tt.wantRuns)
			}
		})
	}
}
