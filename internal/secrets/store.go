package secrets

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/labcluster/gpucluster/internal/atomicfile"
)

// ErrUnsafe is returned when a secret file or directory is readable by
// others: tightening it silently would hide that it leaked.
var ErrUnsafe = errors.New("secret readable by group or others")

// Store holds the secrets under one directory. It is safe for concurrent use
// by one process; bootd is the only writer (the CLI goes through the daemon).
type Store struct {
	dir string
	mu  sync.Mutex
	// keygen makes one key pair; tests may replace it.
	keygen func(dir string, typ KeyType, comment string) (KeyPair, error)
}

// nodeName is what a node directory may be called: the inventory's names
// (master, c1, ...) and nothing that could leave the directory.
var nodeName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Open returns the store in stateDir/secrets, creating it with mode 0700.
func Open(stateDir string) (*Store, error) {
	dir := filepath.Join(stateDir, "secrets")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	if err := checkPrivate(dir, true); err != nil {
		return nil, err
	}
	return &Store{dir: dir, keygen: sshKeygen}, nil
}

// Dir is the directory the store keeps its files in.
func (s *Store) Dir() string { return s.dir }

// Cluster returns the munge key and root's key pair, making them on first use.
func (s *Store) Cluster() (ClusterSecrets, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	munge, err := s.mungeKey()
	if err != nil {
		return ClusterSecrets{}, err
	}
	root, err := s.keyPair(s.dir, "root_ed25519", KeyEd25519, "root@cluster")
	if err != nil {
		return ClusterSecrets{}, err
	}
	ca, err := s.hostCA()
	if err != nil {
		return ClusterSecrets{}, err
	}
	return ClusterSecrets{MungeKey: munge, Root: root, HostCA: ca}, nil
}

// hostCAName is the host CA's key file in the store.
const hostCAName = "host_ca_ed25519"

func (s *Store) hostCA() (KeyPair, error) {
	return s.keyPair(s.dir, hostCAName, KeyEd25519, "host-ca@cluster")
}

// HostKeys returns node's SSH host keys, one per HostKeyTypes entry, making
// the missing ones on first use, each with a certificate from the host CA
// valid for principals (default: the node's name).
func (s *Store) HostKeys(node string, principals ...string) (HostKeys, error) {
	dir, err := s.nodeDir(node)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secrets: host keys of %s: %w", node, err)
	}
	if _, err := s.hostCA(); err != nil {
		return nil, err
	}
	if len(principals) == 0 {
		principals = []string{node}
	}
	keys := make(HostKeys, 0, len(HostKeyTypes))
	for _, t := range HostKeyTypes {
		name := "ssh_host_" + string(t) + "_key"
		k, err := s.keyPair(dir, name, t, "root@"+node)
		if err == nil {
			k.Cert, err = s.hostCert(dir, name, node, principals)
		}
		if err != nil {
			return nil, fmt.Errorf("secrets: host keys of %s: %w", node, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// Forget removes node's host keys, so a name given to another machine (or a
// replaced disk-less PC) gets fresh ones. Forgetting an unknown node is not an
// error.
func (s *Store) Forget(node string) error {
	dir, err := s.nodeDir(node)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("secrets: forget %s: %w", node, err)
	}
	return atomicfile.SyncDir(filepath.Dir(dir))
}

func (s *Store) nodeDir(node string) (string, error) {
	if !nodeName.MatchString(node) {
		return "", fmt.Errorf("secrets: %q is not a node name", node)
	}
	return filepath.Join(s.dir, "hosts", node), nil
}

// checkPrivate refuses a path that group or others can read or enter.
func checkPrivate(path string, wantDir bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	if fi.IsDir() != wantDir || fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("secrets: %s: unexpected file type %v", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("secrets: %s has mode %04o, want no access for group and others: %w", path, perm, ErrUnsafe)
	}
	return nil
}
