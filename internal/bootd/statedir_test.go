package bootd

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("giving files to another user needs root, as CI has")
	}
}

// TestStateDirRefused: a state directory another local user could have written is refused before
// anything in it is read, naming the path; one only others could read is tightened.
func TestStateDirRefused(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, state string) // state exists, 0700, empty
		want  string                           // "" for accepted
	}{
		{"world-writable", func(t *testing.T, state string) { chmod(t, state, 0o777) }, "has mode 0777, writable by group or others"},
		{"group-writable", func(t *testing.T, state string) { chmod(t, state, 0o770) }, "has mode 0770"},
		{"another user's", func(t *testing.T, state string) { chown(t, state) }, "belongs to uid 65534"},
		{"inside a world-writable directory", func(t *testing.T, state string) { chmod(t, filepath.Dir(state), 0o777) }, "which group or others may write (mode 0777)"},
		{"inside another user's directory", func(t *testing.T, state string) { chown(t, filepath.Dir(state)) }, "which belongs to uid 65534"},
		{"a planted inventory", func(t *testing.T, state string) {
			write(t, filepath.Join(state, "inventory.json"), `{"format":2,"nodes":[]}`)
			chown(t, filepath.Join(state, "inventory.json"))
		}, "inventory.json belongs to uid 65534"},
		{"a world-writable journal", func(t *testing.T, state string) {
			write(t, filepath.Join(state, "inventory.json.journal"), "")
			chmod(t, filepath.Join(state, "inventory.json.journal"), 0o666)
		}, "inventory.json.journal has mode 0666"},
		{"readable by others: tightened", func(t *testing.T, state string) { chmod(t, state, 0o755) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "parent", "state")
			if err := os.MkdirAll(state, 0o700); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, state)
			err := prepareStateDir(state)
			if tc.want == "" {
				if fi, _ := os.Stat(state); err != nil || fi.Mode().Perm() != 0o700 {
					t.Fatalf("err = %v, mode %v; want it accepted and 0700", err, fi.Mode())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestPlantedMungeKeyRefused is M2 as it was found: a state directory world-writable before
// bootd's first start, in which another user put secrets/munge.key (mode 0600, theirs). bootd
// used to tighten the directory and serve that key to every node; now it does not start.
func TestPlantedMungeKeyRefused(t *testing.T) {
	needRoot(t)
	state := t.TempDir()
	chmod(t, state, 0o777)
	key := filepath.Join(state, "secrets", "munge.key")
	if err := os.MkdirAll(filepath.Dir(key), 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, key, strings.Repeat("k", 1024))
	for _, p := range []string{filepath.Dir(key), key} {
		chown(t, p)
	}
	if err := prepareStateDir(state); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("state dir: %v, want it refused", err)
	}
	chmod(t, state, 0o700) // an admin who tightened it by hand still gets the planted key refused
	_, _, err := openState(state, StartOptions{}, quiet())
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("openState: %v, want the planted secrets refused", err)
	}
}

// TestEmptyInventoryBesideSecrets is M3: an inventory missing beside secrets of an earlier run
// is refused without --empty-inventory; with it, bootd starts with no nodes, and no host key is
// revoked, as none is for an inventory that exists without nodes.
func TestEmptyInventoryBesideSecrets(t *testing.T) {
	state := t.TempDir()
	d := daemonOn(t, state)
	if err := assignC1(t, d, machineA, false); err != nil {
		t.Fatal(err)
	}
	if _, err := d.secrets.HostKeys("c1", holders(d.inv)["c1"]); err != nil {
		t.Fatal(err)
	}
	if err := d.inv.Compact(); err != nil {
		t.Fatal(err)
	}
	inventory := filepath.Join(state, "inventory.json")
	saved, err := os.ReadFile(inventory)
	if err != nil {
		t.Fatal(err)
	}
	revokedList := filepath.Join(state, "secrets", "revoked_host_keys")
	noneRevoked := func(t *testing.T) {
		t.Helper()
		if b, err := os.ReadFile(revokedList); err == nil && len(bytes.TrimSpace(b)) > 0 {
			t.Errorf("host keys revoked:\n%s", b)
		}
		if _, err := os.Stat(filepath.Join(state, "secrets", "hosts", "c1", "holder")); err != nil {
			t.Errorf("c1's host keys are gone: %v", err)
		}
	}

	t.Run("missing: refused", func(t *testing.T) {
		if err := os.Remove(inventory); err != nil {
			t.Fatal(err)
		}
		_, _, err := openState(state, StartOptions{}, quiet())
		if err == nil || !strings.Contains(err.Error(), "no inventory.json") || !strings.Contains(err.Error(), "host keys of c1") || !strings.Contains(err.Error(), "--empty-inventory") {
			t.Fatalf("openState: %v, want a refusal naming c1's keys and --empty-inventory", err)
		}
		if _, err := os.Stat(inventory); err == nil {
			t.Error("the refused start wrote an inventory")
		}
		noneRevoked(t)
	})
	for _, bad := range []string{"{}", "null"} {
		t.Run(bad+": refused", func(t *testing.T) {
			write(t, inventory, bad)
			if _, _, err := openState(state, StartOptions{}, quiet()); err == nil || !strings.Contains(err.Error(), "has no format") {
				t.Fatalf("openState: %v, want the file refused", err)
			}
			noneRevoked(t)
			os.Remove(inventory)
		})
	}
	t.Run("missing, --empty-inventory: no nodes, keys kept", func(t *testing.T) {
		log, hook := test.NewNullLogger()
		inv, _, err := openState(state, StartOptions{EmptyInventory: true}, log)
		if err != nil {
			t.Fatal(err)
		}
		if nodes, _ := inv.Snapshot(); len(nodes) != 0 {
			t.Errorf("nodes %v, want none", nodes)
		}
		noneRevoked(t)
		if e := hook.LastEntry(); e == nil || e.Level != logrus.WarnLevel || e.Data["nodes"] != "c1" {
			t.Errorf("no warning naming c1's kept keys: %v", e)
		}
		if _, _, err := openState(state, StartOptions{}, quiet()); err != nil {
			t.Errorf("the next start, on the inventory the last one wrote: %v", err)
		}
	})
	t.Run("the saved inventory again: c1 keeps its keys", func(t *testing.T) {
		write(t, inventory, string(saved))
		if _, _, err := openState(state, StartOptions{}, quiet()); err != nil {
			t.Fatal(err)
		}
		noneRevoked(t)
	})
}

// TestDeletedSecretsAreLogged: a munge key or host CA deleted beside the other secrets is made
// again, as before, but no longer silently.
func TestDeletedSecretsAreLogged(t *testing.T) {
	state := t.TempDir()
	d := daemonOn(t, state)
	if _, err := d.secrets.Cluster(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"munge.key", "host_ca_ed25519", "host_ca_ed25519.pub"} {
		if err := os.Remove(filepath.Join(state, "secrets", f)); err != nil {
			t.Fatal(err)
		}
	}
	log, hook := test.NewNullLogger()
	if _, _, err := openState(state, StartOptions{}, log); err != nil {
		t.Fatal(err)
	}
	var said []string
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel {
			said = append(said, e.Message)
		}
	}
	all := strings.Join(said, "\n")
	for _, want := range []string{"the munge key is missing", "the SSH host CA is missing"} {
		if !strings.Contains(all, want) {
			t.Errorf("no warning saying %q; warnings:\n%s", want, all)
		}
	}
}

func quiet() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

func chmod(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, p string) {
	t.Helper()
	if err := os.Chown(p, nobody, nobody); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
