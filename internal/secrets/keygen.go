package secrets

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// sshKeygen makes a key pair with the system's ssh-keygen rather than Go
// code: it is the tool admins trust for this, it writes the OpenSSH private
// key format sshd reads, and golang.org/x/crypto/ssh (the Go encoder) is not a
// dependency of this module. It works in a private temporary directory under
// tmpRoot (the store's 0700 directory), never in /tmp.
func sshKeygen(tmpRoot string, typ KeyType, comment string) (KeyPair, error) {
	dir, err := os.MkdirTemp(tmpRoot, ".keygen-")
	if err != nil {
		return KeyPair{}, fmt.Errorf("secrets: ssh-keygen: %w", err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "key")
	args := append([]string{"-q", "-t", string(typ)}, keyBits(typ)...)
	args = append(args, "-N", "", "-C", comment, "-f", file)
	cmd := exec.Command("ssh-keygen", args...)
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return KeyPair{}, fmt.Errorf("secrets: ssh-keygen -t %s: %w: %s", typ, err, strings.TrimSpace(stderr.String()))
	}
	priv, err := os.ReadFile(file)
	if err != nil {
		return KeyPair{}, fmt.Errorf("secrets: ssh-keygen: %w", err)
	}
	pub, err := os.ReadFile(file + ".pub")
	if err != nil {
		return KeyPair{}, fmt.Errorf("secrets: ssh-keygen: %w", err)
	}
	return parsePair(typ, priv, pub)
}

// keyBits pins the sizes Rocky 9's sshd-keygen would choose, so the result
// does not depend on the ssh-keygen version's defaults.
func keyBits(typ KeyType) []string {
	switch typ {
	case KeyRSA:
		return []string{"-b", "3072"}
	case KeyECDSA:
		return []string{"-b", "256"}
	}
	return nil
}

// publicPrefix is the algorithm name each type's public key line starts with.
var publicPrefix = map[KeyType]string{
	KeyEd25519: "ssh-ed25519 ",
	KeyECDSA:   "ecdsa-sha2-nistp256 ",
	KeyRSA:     "ssh-rsa ",
}

// parsePair checks the shape of a stored or generated pair: enough to catch a
// truncated or swapped file, not a full key parser.
func parsePair(typ KeyType, priv, pub []byte) (KeyPair, error) {
	const begin, end = "-----BEGIN OPENSSH PRIVATE KEY-----\n", "-----END OPENSSH PRIVATE KEY-----\n"
	p := string(priv)
	if !strings.HasPrefix(p, begin) || !strings.HasSuffix(p, end) {
		return KeyPair{}, fmt.Errorf("secrets: %s private key is not in OpenSSH format", typ)
	}
	q := strings.TrimSpace(string(pub))
	prefix, ok := publicPrefix[typ]
	if !ok || !strings.HasPrefix(q, prefix) || strings.Contains(q, "\n") {
		return KeyPair{}, fmt.Errorf("secrets: %s public key is not one %q line", typ, strings.TrimSpace(prefix))
	}
	return KeyPair{Type: typ, Private: p, Public: q}, nil
}
