package secrets

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
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

// revokedKey is one line of the revoked list: a key, and the node it was revoked from.
type revokedKey struct{ key, node string }

// RevokedHostKeys returns every host key revoked so far, oldest first, each as a known_hosts key:
// type and base64 (the file names the node each came from, for the admin who reads it).
func (s *Store) RevokedHostKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, len(s.revoked))
	for i, r := range s.revoked {
		keys[i] = r.key
	}
	return keys
}

// readRevoked reads the revoked list, empty when there is none.
func readRevoked(path string) ([]revokedKey, error) {
	b, err := readSecret(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []revokedKey
	for l := range strings.Lines(string(b)) {
		if key := keyOnly(l); key != "" {
			list = append(list, revokedKey{key: key, node: strings.Join(strings.Fields(l)[2:], " ")})
		}
	}
	return list, nil
}

// revoke adds the public host keys in dir (node's) to the revoked list. Callers hold s.mu. The
// list in memory is what the file held at its last write: a write that failed is redone whole by
// the next revoke (Forget, a claim or Prune retries the forget).
func (s *Store) revoke(dir, node string) error {
	list := slices.Clone(s.revoked)
	listed := make(map[string]bool, len(list))
	for _, r := range list {
		listed[r.key] = true
	}
	for _, t := range HostKeyTypes {
		pub, err := readSecret(filepath.Join(dir, "ssh_host_"+string(t)+"_key.pub"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if key := keyOnly(string(pub)); key != "" && !listed[key] {
			listed[key] = true
			list = append(list, revokedKey{key: key, node: node})
		}
	}
	if len(list) == len(s.revoked) {
		return nil
	}
	var file strings.Builder
	for _, r := range list {
		file.WriteString(strings.TrimSpace(r.key+" "+r.node) + "\n")
	}
	if err := writeAtomic(filepath.Join(s.dir, revokedFile), []byte(file.String())); err != nil {
		return err
	}
	s.revoked = list
	return nil
}

// keyOnly is a public key line's type and base64, without its comment.
func keyOnly(line string) string {
	f := strings.Fields(line)
	if len(f) < 2 {
		return ""
	}
	return f[0] + " " + f[1]
}
