package secrets

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// nodeTokenKeyFile holds the key bootd derives node tokens from: a node with a TPM gets its token
// inside its sealed overlay and shows it when it reports (hello, hardware), so only the machine
// whose TPM opened the overlay can speak for the node. Derived, not stored per node: the same
// token at every boot of the same holder and TPM, and nothing to keep in step.
const nodeTokenKeyFile = "node-token.key"

// nodeTokenKeyLen is an HMAC-SHA256 key's natural size.
const nodeTokenKeyLen = 32

// HasNodeTokenKey says whether the node-token key is on disk (bootd's start warns when nodes with a
// TPM are recorded and it is gone).
func (s *Store) HasNodeTokenKey() (bool, error) {
	_, err := os.Lstat(filepath.Join(s.dir, nodeTokenKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// NodeTokenKey returns the node-token key, making it on first use. Should it be lost, a new one
// only makes the tokens nodes hold stale until their next boot fetches new ones.
func (s *Store) NodeTokenKey() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokenKey != nil {
		return bytes.Clone(s.tokenKey), nil
	}
	path := filepath.Join(s.dir, nodeTokenKeyFile)
	key, err := readSecret(path)
	switch {
	case err == nil && len(key) != nodeTokenKeyLen:
		return nil, fmt.Errorf("secrets: %s holds %d bytes, want %d", path, len(key), nodeTokenKeyLen)
	case errors.Is(err, fs.ErrNotExist):
		key = make([]byte, nodeTokenKeyLen)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("secrets: node-token key: %w", err)
		}
		if err := writeAtomic(path, key); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	}
	s.tokenKey = key
	return bytes.Clone(key), nil
}
