package overlay

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/secrets"
)

// TestRealKeysStayHome renders with keys from a real secrets store: no line
// of c1's host private keys (base64 body lines, not just the markers the
// fake keys carry) appears in any file of c2 or in any public file. Lines
// that are not secret are left out: the format's header, the same in every
// key, and lines that spell out the public key the private file embeds.
func TestRealKeysStayHome(t *testing.T) {
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Fatal("ssh-keygen not installed (Debian: openssh-client; scripts/setup-debian.sh installs it)")
	}
	store, err := secrets.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := reference()
	cs, err := store.Cluster()
	if err != nil {
		t.Fatal(err)
	}
	c.Secrets = Secrets{MungeKey: cs.MungeKey, RootPublicKey: cs.Root.Public, RootPrivateKey: cs.Root.Private, HostCAPublic: cs.HostCA.Public,
		HostKeys: map[string]HostKeys{}}
	for _, n := range c.Nodes {
		keys, err := store.HostKeys(n.Name, n.MAC)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			c.Secrets.HostKeys[n.Name] = append(c.Secrets.HostKeys[n.Name], HostKey{Type: string(k.Type), Private: k.Private, Public: k.Public, Cert: k.Cert})
		}
	}
	c2 := render(t, c, "c2")
	c1 := render(t, c, "c1")
	checked := 0
	for _, k := range c.Secrets.HostKeys["c1"] {
		for _, line := range strings.Split(k.Private, "\n") {
			if len(line) < 16 || strings.HasPrefix(line, "-----") || !secretLine(c, "c1", line) {
				continue
			}
			checked++
			if bytes.Contains(concat(c2), []byte(line)) {
				t.Errorf("c2's files hold a line of c1's %s private key", k.Type)
			}
			if bytes.Contains(concat(Public(c1)), []byte(line)) {
				t.Errorf("c1's public files hold a line of its %s private key", k.Type)
			}
		}
	}
	if checked < 3 {
		t.Fatalf("only %d secret lines checked", checked)
	}
	if bytes.Contains(concat(Public(c1)), cs.MungeKey[:64]) {
		t.Error("c1's public files hold the munge key")
	}
}

// secretLine says whether line of node's private key is its own: in no other
// node's private key and in no public key.
func secretLine(c Cluster, node, line string) bool {
	for name, keys := range c.Secrets.HostKeys {
		for _, k := range keys {
			if strings.Contains(k.Public, line) || (name != node && strings.Contains(k.Private, line)) {
				return false
			}
		}
	}
	return true
}
