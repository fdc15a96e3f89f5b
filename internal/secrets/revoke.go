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

// RevokedHostKeys returns every host key revoked so far, oldest first, each as a known_hosts key:
// type and base64 (the file names the node each came from, for the admin who reads it).
func (s *Store) RevokedHostKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, len(s.revoked))
	for i, l := range s.revoked {
		keys[i] = keyOnly(l)
	}
	return keys
}

// readLines are the lines of a secret file that are not blank, none when there is no file.
func readLines(path string) ([]string, error) {
	b, err := readSecret(path)
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

// revoke adds the public host keys in dir (node's) to the revoked list. Callers hold s.mu.
func (s *Store) revoke(dir, node string) error {
	lines := slices.Clone(s.revoked)
	listed := make(map[string]bool, len(lines))
	for _, l := range lines {
		listed[keyOnly(l)] = true
	}
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
		if key == "" || listed[key] {
			continue
		}
		listed[key] = true
		lines = append(lines, key+" "+node)
		added = true
	}
	if !added {
		return nil
	}
	path := filepath.Join(s.dir, revokedFile)
	if err := writeAtomic(path, []byte(strings.Join(lines, "\n")+"\n")); err != nil {
		// The rename may have happened: hold what the file holds.
		if now, rerr := readLines(path); rerr == nil {
			s.revoked = now
		}
		return err
	}
	s.revoked = lines
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
