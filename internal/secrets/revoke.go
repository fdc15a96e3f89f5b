package secrets

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A host certificate never expires (signHostKey), and every node trusts the host CA for every
// name of the address plan. So when a name leaves its machine, deleting the keys is not enough:
// the old machine still holds a certificate for the name. Its keys go on a revoked list instead,
// which every node's known_hosts carries as @revoked lines: OpenSSH then refuses those keys,
// with or without their certificate.

// revokedFile is the revoked list in the store: one public key per line, as known_hosts writes
// it ("ssh-ed25519 AAAA... c1": the comment names the node it was revoked from).
const revokedFile = "revoked_host_keys"

// RevokedHostKeys returns every host key revoked so far, one known_hosts key per line (type,
// base64, the node it belonged to), oldest first.
func (s *Store) RevokedHostKeys() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revokedLines()
}

func (s *Store) revokedLines() ([]string, error) {
	b, err := readSecret(filepath.Join(s.dir, revokedFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var lines []string
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// revokedSet is the revoked keys, without their comments (keyOnly). Callers hold s.mu.
func (s *Store) revokedSet() (map[string]bool, error) {
	lines, err := s.revokedLines()
	return keysOf(lines), err
}

func keysOf(lines []string) map[string]bool {
	set := make(map[string]bool, len(lines))
	for _, l := range lines {
		set[keyOnly(l)] = true
	}
	return set
}

// revoke adds the public host keys in dir (node's) to the revoked list. Callers hold s.mu.
func (s *Store) revoke(dir, node string) error {
	lines, err := s.revokedLines()
	if err != nil {
		return err
	}
	set := keysOf(lines)
	added := false
	for _, t := range HostKeyTypes {
		pub, err := readSecret(filepath.Join(dir, "ssh_host_"+string(t)+"_key.pub"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		key := keyOnly(string(pub))
		if key == "" || set[key] {
			continue
		}
		set[key] = true
		lines = append(lines, key+" "+node)
		added = true
	}
	if !added {
		return nil
	}
	return writeAtomic(filepath.Join(s.dir, revokedFile), []byte(strings.Join(lines, "\n")+"\n"))
}

// keyOnly is a public key line's type and base64, without its comment.
func keyOnly(line string) string {
	f := strings.Fields(line)
	if len(f) < 2 {
		return ""
	}
	return f[0] + " " + f[1]
}

// removeHostKey removes one host key's files: the pair, and the certificate with what it was
// signed for.
func removeHostKey(dir, name string) error {
	for _, f := range []string{name, name + ".pub", name + "-cert.pub", name + "-cert.principals"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}
