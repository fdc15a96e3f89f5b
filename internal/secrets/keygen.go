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

// hostCert returns the certificate of dir/name.pub (whose key is pub), signing it with the host
// CA when there is none yet, or when the one there was made for other principals or another key
// (what it was signed for is recorded beside it): a key made anew after a crash must not be
// served with the old key's certificate.
func (s *Store) hostCert(dir, name, node, pub string, principals []string) (string, error) {
	certPath, signedPath := filepath.Join(dir, name+"-cert.pub"), filepath.Join(dir, name+"-cert.principals")
	list := strings.Join(principals, ",")
	ca, err := s.hostCA()
	if err != nil {
		return "", err
	}
	// The CA is part of what a certificate was signed for: after a new CA (the old one deleted),
	// every certificate is signed again, not served signed by a CA no known_hosts trusts.
	signedFor := list + "\n" + keyOnly(pub) + "\n" + keyOnly(ca.Public)
	if was, err := os.ReadFile(signedPath); err == nil && string(was) == signedFor {
		if cert, err := os.ReadFile(certPath); err == nil {
			return strings.TrimSpace(string(cert)), nil
		}
	}
	cert, err := signHostKey(s.dir, filepath.Join(s.dir, hostCAName), filepath.Join(dir, name+".pub"), node, list)
	if err != nil {
		return "", err
	}
	if err := writeAtomic(certPath, []byte(cert+"\n")); err != nil {
		return "", err
	}
	return cert, writeAtomic(signedPath, []byte(signedFor))
}

// signHostKey runs ssh-keygen -s on a copy of pub in a private temporary directory (ssh-keygen
// writes the certificate beside its input). Host certificates never expire: a node's key changes
// only when its name changes holder or is forgotten, and then it is revoked (revoke.go).
func signHostKey(tmpRoot, ca, pub, node, principals string) (string, error) {
	dir, err := os.MkdirTemp(tmpRoot, ".sign-")
	if err != nil {
		return "", fmt.Errorf("secrets: sign host key: %w", err)
	}
	defer os.RemoveAll(dir)
	data, err := os.ReadFile(pub)
	if err != nil {
		return "", fmt.Errorf("secrets: sign host key: %w", err)
	}
	in := filepath.Join(dir, "key.pub")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		return "", fmt.Errorf("secrets: sign host key: %w", err)
	}
	cmd := exec.Command("ssh-keygen", "-q", "-s", ca, "-h", "-I", node, "-n", principals, "-V", "always:forever", in)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("secrets: ssh-keygen -s: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	cert, err := os.ReadFile(filepath.Join(dir, "key-cert.pub"))
	if err != nil {
		return "", fmt.Errorf("secrets: sign host key: %w", err)
	}
	return strings.TrimSpace(string(cert)), nil
}
