package overlay

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/secrets"
)

// TestSSHRefusesRevokedHostKeys has the real ssh client check hosts against the known_hosts
// rendered for c2, after c1 moved from machine A to machine B: a real sshd on loopback that
// presents A's old c1 key and its host certificate (which never expires) is refused, one that
// presents B's new key and certificate is accepted. The same check against a known_hosts without
// the revoked lines accepts A's: the CA line alone would let the old machine pass as c1.
func TestSSHRefusesRevokedHostKeys(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root for sshd: run as root, as CI does")
	}
	for _, tool := range []string{"/usr/sbin/sshd", "ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (Debian: openssh-server, openssh-client; scripts/setup-debian.sh installs them)", tool)
		}
	}
	store, err := secrets.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	principals := []string{"c1", "c1.lab", "10.80.0.101"}
	onA, err := store.HostKeys("c1", "machine A", principals...)
	if err != nil {
		t.Fatal(err)
	}
	onB, err := store.HostKeys("c1", "machine B", principals...)
	if err != nil {
		t.Fatal(err)
	}
	revoked := store.RevokedHostKeys()
	cs, err := store.Cluster()
	if err != nil {
		t.Fatal(err)
	}
	c := reference()
	c.Secrets.HostCAPublic = cs.HostCA.Public
	c.Secrets.HostKeys["c1"] = overlayKeys(onB)
	c.Secrets.RevokedHostKeys = nil
	before := fileData(t, c, "c2", "/etc/ssh/ssh_known_hosts")
	c.Secrets.RevokedHostKeys = revoked
	after := fileData(t, c, "c2", "/etc/ssh/ssh_known_hosts")

	for _, tc := range []struct {
		name       string
		knownHosts []byte
		server     secrets.KeyPair
		accepted   bool
	}{
		{"A's old key, revoked", after, onA[0], false},
		{"B's new key", after, onB[0], true},
		{"A's old key, known_hosts without the revoked lines", before, onA[0], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := startSSHD(t, tc.server)
			out, accepted := sshHostCheck(t, tc.knownHosts, port)
			if accepted != tc.accepted {
				t.Errorf("host key accepted: %v, want %v; ssh said:\n%s", accepted, tc.accepted, out)
			}
			if !accepted && !strings.Contains(out, "REVOKED HOST KEY") {
				t.Errorf("refused, but not as revoked; ssh said:\n%s", out)
			}
		})
	}
}

func overlayKeys(keys secrets.HostKeys) HostKeys {
	var out HostKeys
	for _, k := range keys {
		out = append(out, HostKey{Type: string(k.Type), Private: k.Private, Public: k.Public, Cert: k.Cert})
	}
	return out
}

// startSSHD runs sshd on a free loopback port with key and its certificate as its only host key,
// until the test ends, and returns the port once it listens.
func startSSHD(t *testing.T, key secrets.KeyPair) int {
	t.Helper()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "host_key")
	for name, data := range map[string]string{"host_key": key.Private, "host_key.pub": key.Public + "\n", "host_key-cert.pub": key.Cert + "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // sshd's privilege separation directory
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "/usr/sbin/sshd", "-D", "-e", "-f", "/dev/null",
		"-o", "ListenAddress=127.0.0.1:"+strconv.Itoa(port), "-o", "HostKey="+keyFile,
		"-o", "HostCertificate="+keyFile+"-cert.pub", "-o", "PidFile=none", "-o", "UsePAM=no")
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
			c.Close()
			return port
		}
	}
	t.Fatalf("sshd does not listen on port %d:\n%s", port, log.String())
	return 0
}

// sshHostCheck connects to port as host c1 with knownHosts and strict checking, and reports
// whether the host key passed: the connection then fails only at user authentication (no key
// is offered).
func sshHostCheck(t *testing.T, knownHosts []byte, port int) (string, bool) {
	t.Helper()
	kh := filepath.Join(t.TempDir(), "ssh_known_hosts")
	if err := os.WriteFile(kh, knownHosts, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ssh", "-F", "/dev/null", "-p", strconv.Itoa(port),
		"-o", "GlobalKnownHostsFile="+kh, "-o", "UserKnownHostsFile=/dev/null", "-o", "HostKeyAlias=c1",
		"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
		"-o", "IdentityFile=none", "-o", "PubkeyAuthentication=no", "-o", "PasswordAuthentication=no",
		"-o", "KbdInteractiveAuthentication=no", "root@127.0.0.1", "true").CombinedOutput()
	if err == nil {
		t.Fatalf("ssh logged in without a key:\n%s", out)
	}
	return string(out), strings.Contains(string(out), "Permission denied")
}
