package inventory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenRefusesBadEntries: a hand-edited inventory with an entry bootd could not match is
// refused, naming the file and the entry, and left as it was.
func TestOpenRefusesBadEntries(t *testing.T) {
	const (
		c1 = `{"name":"c1","role":"compute","mac":"52:54:00:00:00:01","address":"10.80.0.101","state":"up"}`
		c2 = `{"name":"c2","role":"compute","mac":"52:54:00:00:00:02","address":"10.80.0.102","state":"up"}`
	)
	inv := func(nodes, waiting string) string {
		return `{"format":2,"seq":3,"nodes":[` + nodes + `],"waiting":[` + waiting + `],"leases":[]}` + "\n"
	}
	edit := func(node, from, to string) string { return strings.Replace(node, from, to, 1) }
	for _, tt := range []struct {
		name, file string
		want       string // "" = loads
	}{
		{"valid", inv(c1+","+c2, `{"mac":"52:54:00:00:00:09"}`), ""},
		{"empty lists", inv("", ""), ""},
		{"bad mac", inv(c1+","+edit(c2, "00:02", "00:ZZ"), ""),
			`nodes[1] ("c2"): mac: "52:54:00:00:00:ZZ" is not an Ethernet MAC address`},
		{"short mac", inv(edit(c1, "52:54:00:00:00:01", "52:54:00:00:01"), ""), `nodes[0] ("c1"): mac: "52:54:00:00:01" is not`},
		{"mac in capitals", inv(edit(c1, "00:01", "00:0A"), ""),
			`nodes[0] ("c1"): mac "52:54:00:00:00:0A": write it as "52:54:00:00:00:0a"`},
		{"mac with dashes", inv(edit(c1, "52:54:00:00:00:01", "52-54-00-00-00-01"), ""), `write it as "52:54:00:00:00:01"`},
		{"no mac", inv(edit(c1, `"52:54:00:00:00:01"`, `""`), ""), `nodes[0] ("c1"): mac: "" is not`},
		{"no name", inv(edit(c1, `"c1"`, `""`), ""), `nodes[0] (""): name is missing`},
		{"no address", inv(edit(c1, `"10.80.0.101"`, `""`), ""), `nodes[0] ("c1"): address is missing`},
		{"ipv6 address", inv(edit(c1, `"10.80.0.101"`, `"fd00::1"`), ""), `address fd00::1 is not an IPv4 address`},
		{"name twice", inv(c1+","+edit(c2, `"c2"`, `"c1"`), ""), `nodes[1] ("c1"): name c1: nodes[0] has it too`},
		{"mac twice", inv(c1+","+edit(c2, "00:02", "00:01"), ""), `nodes[1] ("c2"): mac 52:54:00:00:00:01: nodes[0] has it too`},
		{"address twice", inv(c1+","+edit(c2, ".102", ".101"), ""), `nodes[1] ("c2"): address 10.80.0.101: nodes[0] has it too`},
		{"tpm", inv(edit(c1, `"state":"up"`, `"state":"up","tpm":{"ek":"ZWs=","ek_sha256":"`+NewTPM([]byte("ek"), false, time.Time{}).EKSHA256+`"}`), ""), ""},
		{"tpm fingerprint edited", inv(edit(c1, `"state":"up"`, `"state":"up","tpm":{"ek":"ZWs=","ek_sha256":"00"}`), ""),
			`nodes[0] ("c1"): tpm: ek_sha256 "00" is not the SHA-256 of ek`},
		{"bad waiting mac", inv(c1, `{"mac":"52:54:00:00:00:09"},{"mac":"nope"}`), `waiting[1]: mac: "nope" is not`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "inventory.json")
			if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Open(path)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Open = %v, want it loaded", err)
			case tt.want == "":
				return
			case err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path):
				t.Fatalf("Open = %v, want an error naming %s and %q", err, path, tt.want)
			}
			if b, _ := os.ReadFile(path); string(b) != tt.file {
				t.Errorf("the refused file was rewritten:\n%s", b)
			}
		})
	}
}

// TestOpenRefusesABadJournal: the journal's last line, which wins over the file, is checked too.
func TestOpenRefusesABadJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.json")
	if err := os.WriteFile(path, []byte(`{"format":2,"seq":1,"nodes":[],"waiting":[],"leases":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	line := `{"format":2,"seq":2,"nodes":[],"waiting":[{"mac":"52:54:00:00:00:zz"}],"leases":[]}` + "\n"
	if err := os.WriteFile(journalOf(path), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path)
	if err == nil || !strings.Contains(err.Error(), journalOf(path)) || !strings.Contains(err.Error(), `waiting[0]: mac: "52:54:00:00:00:zz"`) {
		t.Fatalf("Open = %v, want an error naming the journal and the entry", err)
	}
}
