package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/labcluster/gpucluster/internal/atomicfile"
)

// ErrUnsafe is returned when a secret file or directory is open to group or others, or belongs
// to another user: tightening it silently would hide that it leaked, or serve a secret someone
// else planted.
var ErrUnsafe = errors.New("secret not private to bootd's user")

// Store holds the secrets under one directory. It is safe for concurrent use
// by one process; bootd is the only writer (the CLI goes through the daemon).
//
// It keeps what it has read or written in memory: bootd renders every node's keys for each
// node that boots, which at 200 nodes was 3,000 file reads per render and 95% of its time
// (BenchmarkRender in internal/bootd). Since no one else writes the directory, what it holds
// stays true; secrets edited by hand may go unseen until bootd's next start.
type Store struct {
	dir string
	mu  sync.Mutex
	// keygen makes one key pair; tests may replace it.
	keygen func(dir string, typ KeyType, comment string) (KeyPair, error)

	// Guarded by mu: what the files hold, once read or written.
	cluster  *ClusterSecrets
	hosts    map[string]heldKeys    // by node name
	revoked  []revokedKey           // the revoked list, read at Open
	bmc      map[string]BMCPassword // BMC passwords by file name, once read ("": no file)
	tokenKey []byte                 // the node-token key, once read or made
}

// heldKeys are one node's host keys as its directory holds them.
type heldKeys struct {
	holder     string // the holder the directory records, "" for none
	principals string // what the certificates were signed for, comma-separated
	keys       HostKeys
}

// nodeName is what a node directory may be called: the inventory's names
// (master, c1, ...) and nothing that could leave the directory.
var nodeName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Open returns the store in stateDir/secrets, creating it with mode 0700. Everything already in
// it must be a directory or regular file of this process's user, with no access for group or
// others (checkPrivate): a store that another local user could have written (a munge key planted
// in a state directory that was world-writable before bootd first started) is refused whole.
func Open(stateDir string) (*Store, error) {
	dir := filepath.Join(stateDir, "secrets")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("secrets: %w", err)
		}
		return checkPrivate(p, d.IsDir())
	})
	if err != nil {
		return nil, err
	}
	revoked, err := readRevoked(filepath.Join(dir, revokedFile))
	if err != nil {
		return nil, err
	}
	return &Store{dir: dir, keygen: sshKeygen, hosts: map[string]heldKeys{}, revoked: revoked}, nil
}

// Dir is the directory the store keeps its files in.
func (s *Store) Dir() string { return s.dir }

// Cluster returns the munge key and root's key pair, making them on first use.
func (s *Store) Cluster() (ClusterSecrets, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster == nil {
		c, err := s.loadCluster()
		if err != nil {
			return ClusterSecrets{}, err
		}
		s.cluster = &c
	}
	c := *s.cluster
	c.MungeKey = bytes.Clone(c.MungeKey)
	return c, nil
}

// loadCluster reads the cluster's secrets, making those missing. Callers hold s.mu.
func (s *Store) loadCluster() (ClusterSecrets, error) {
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

// hostCA is the host CA's key pair, made on first use. Callers hold s.mu.
func (s *Store) hostCA() (KeyPair, error) {
	if s.cluster != nil {
		return s.cluster.HostCA, nil
	}
	return s.keyPair(s.dir, hostCAName, KeyEd25519, "host-ca@cluster")
}

// HostKeys returns node's SSH host keys as held by holder (the machine the name is assigned to,
// and when: see the caller), one per HostKeyTypes entry, each with a certificate from the host CA
// valid for principals (default: the node's name). Missing keys are made on first use.
//
// The keys belong to one holder. When another holder asks for the name, the keys the previous
// one held are revoked (RevokedHostKeys) and removed, and new ones made: the previous machine
// has the private halves. So a name that moves to other hardware gets fresh keys even when the
// Forget that should have followed was lost in a crash. An empty holder is a name no machine
// holds yet (the master before it is assigned): its keys are made for their public halves, and
// the first holder to ask takes them over, as it does keys recorded before holders were.
func (s *Store) HostKeys(node, holder string, principals ...string) (HostKeys, error) {
	dir, err := s.nodeDir(node)
	if err != nil {
		return nil, err
	}
	if len(principals) == 0 {
		principals = []string{node}
	}
	list := strings.Join(principals, ",")
	s.mu.Lock()
	defer s.mu.Unlock()
	// Held keys answer when claim would change nothing: the holder is theirs, or none is asked.
	if h, ok := s.hosts[node]; ok && h.principals == list && (holder == "" || holder == h.holder) {
		return slices.Clone(h.keys), nil
	}
	recorded, err := s.claim(dir, node, holder)
	if err != nil {
		return nil, fmt.Errorf("secrets: host keys of %s: %w", node, err)
	}
	keys, err := s.loadHostKeys(dir, node, principals)
	if err != nil {
		return nil, err
	}
	s.hosts[node] = heldKeys{holder: recorded, principals: list, keys: keys}
	return slices.Clone(keys), nil
}

// loadHostKeys reads the keys in node's directory dir, making and signing those missing.
// Callers hold s.mu.
func (s *Store) loadHostKeys(dir, node string, principals []string) (HostKeys, error) {
	if _, err := s.hostCA(); err != nil {
		return nil, err
	}
	keys := make(HostKeys, 0, len(HostKeyTypes))
	for _, t := range HostKeyTypes {
		name := "ssh_host_" + string(t) + "_key"
		k, err := s.keyPair(dir, name, t, "root@"+node)
		if err == nil {
			k.Cert, err = s.hostCert(dir, name, node, k.Public, principals)
		}
		if err != nil {
			return nil, fmt.Errorf("secrets: host keys of %s: %w", node, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// holderFile records, in a node's directory, which holder its keys belong to.
const holderFile = "holder"

// storedHolder is the holder recorded in dir, and whether one is.
func storedHolder(dir string) (string, bool, error) {
	b, err := readSecret(filepath.Join(dir, holderFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	return string(b), err == nil, err
}

// claim makes dir hold holder's keys: a directory of another holder is forgotten first. It
// returns the holder dir records now, "" for none. Callers hold s.mu.
func (s *Store) claim(dir, node, holder string) (string, error) {
	stored, recorded, err := storedHolder(dir)
	if err != nil {
		return "", err
	}
	if recorded && holder != "" && stored != holder {
		if err := s.forget(dir, node); err != nil {
			return "", err
		}
		recorded = false
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if holder == "" || recorded {
		return stored, nil
	}
	return holder, writeAtomic(filepath.Join(dir, holderFile), []byte(holder))
}

// Forget revokes node's host keys and removes them, so a name given to another machine (or a
// replaced disk-less PC) gets fresh ones. Forgetting an unknown node is not an error.
func (s *Store) Forget(node string) error {
	dir, err := s.nodeDir(node)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.forget(dir, node); err != nil {
		return fmt.Errorf("secrets: forget %s: %w", node, err)
	}
	return nil
}

// Prune forgets the host keys of every node whose recorded holder is not holders[node], among the
// nodes holders lists (assigned to another machine) and those in released (unassigned): bootd
// calls it at start with the inventory's, which redoes a Forget that a crash cut off after the
// inventory changed. A name neither lists keeps its keys: an inventory that lost it (deleted,
// restored from an old backup) is no word that its machine gave it up. Keys with no holder
// recorded are left alone; what a removal cut short left (goneDir) is removed.
func (s *Store) Prune(holders map[string]string, released []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	hosts := filepath.Join(s.dir, "hosts")
	entries, err := os.ReadDir(hosts)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), goneDir) {
			if err := os.RemoveAll(filepath.Join(hosts, e.Name())); err != nil {
				return fmt.Errorf("secrets: %w", err)
			}
			continue
		}
		dir, err := s.nodeDir(e.Name())
		if err != nil {
			continue // not a node's directory: never made by this package
		}
		stored, recorded, err := storedHolder(dir)
		if err != nil {
			return err
		}
		h, assigned := holders[e.Name()]
		if !recorded || stored == h || !assigned && !slices.Contains(released, e.Name()) {
			continue
		}
		if err := s.forget(dir, e.Name()); err != nil {
			return fmt.Errorf("secrets: forget %s: %w", e.Name(), err)
		}
	}
	return nil
}

// goneDir starts the name a node's directory is renamed to before it is removed.
const goneDir = ".gone-"

// forget revokes the keys in dir, then takes dir out of use in one rename before removing it: a
// crash leaves either the whole directory of the old holder (forgotten again by the next holder's
// claim or by Prune) or none, never part of one. Callers hold s.mu.
func (s *Store) forget(dir, node string) error {
	delete(s.hosts, node)
	if err := s.revoke(dir, node); err != nil {
		return err
	}
	gone := filepath.Join(filepath.Dir(dir), goneDir+node)
	if err := os.RemoveAll(gone); err != nil {
		return err
	}
	if err := os.Rename(dir, gone); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if err := atomicfile.SyncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	return os.RemoveAll(gone)
}

func (s *Store) nodeDir(node string) (string, error) {
	if !nodeName.MatchString(node) {
		return "", fmt.Errorf("secrets: %q is not a node name", node)
	}
	return filepath.Join(s.dir, "hosts", node), nil
}

// checkPrivate refuses a path that group or others can read or enter, or that another user owns.
func checkPrivate(path string, wantDir bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	if fi.IsDir() != wantDir || !fi.IsDir() && !fi.Mode().IsRegular() {
		return fmt.Errorf("secrets: %s: unexpected file type %v", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("secrets: %s has mode %04o, want no access for group and others: %w", path, perm, ErrUnsafe)
	}
	if uid, me := fi.Sys().(*syscall.Stat_t).Uid, os.Geteuid(); int(uid) != me {
		return fmt.Errorf("secrets: %s belongs to uid %d, not to bootd's (uid %d): another user could have put it there; check it, then remove it or chown it: %w", path, uid, me, ErrUnsafe)
	}
	return nil
}

// Empty reports whether the store holds nothing yet: a first start.
func (s *Store) Empty() (bool, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return false, fmt.Errorf("secrets: %w", err)
	}
	return len(entries) == 0, nil
}

// Held lists the nodes whose host keys record a holder (a machine their name was assigned to).
func (s *Store) Held() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "hosts"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	var held []string
	for _, e := range entries {
		dir, err := s.nodeDir(e.Name())
		if err != nil {
			continue
		}
		if _, recorded, err := storedHolder(dir); err != nil {
			return nil, err
		} else if recorded {
			held = append(held, e.Name())
		}
	}
	return held, nil
}

// Missing lists the cluster-wide secrets (munge.key, root's key, the host CA) that are absent
// where the store shows they were made: Cluster makes all three at once, HostKeys the host CA
// before any node's keys. So they were deleted; the next request makes new ones, and the caller
// says so aloud, because every node must fetch its files again (and SSH clients the new CA)
// before the cluster works with them.
func (s *Store) Missing() ([]string, error) {
	has := map[string]bool{}
	for _, name := range []string{"munge.key", "root_ed25519", hostCAName, "hosts"} {
		_, err := os.Lstat(filepath.Join(s.dir, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("secrets: %w", err)
		}
		has[name] = err == nil
	}
	var missing []string
	if !has["munge.key"] && has["root_ed25519"] {
		missing = append(missing, "munge.key")
	}
	if !has[hostCAName] && (has["munge.key"] || has["root_ed25519"] || has["hosts"]) {
		missing = append(missing, hostCAName)
	}
	if !has["root_ed25519"] && has["munge.key"] {
		missing = append(missing, "root_ed25519")
	}
	return missing, nil
}
