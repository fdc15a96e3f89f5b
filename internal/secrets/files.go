package secrets

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/labcluster/gpucluster/internal/atomicfile"
)

// mungeKeyLen is the classic `dd if=/dev/urandom bs=1 count=1024` key, the
// largest munged accepts (mungekey's default is 1024 bits).
const mungeKeyLen = 1024

// minMungeKeyLen is the smallest key munged accepts.
const minMungeKeyLen = 32

func (s *Store) mungeKey() ([]byte, error) {
	path := filepath.Join(s.dir, "munge.key")
	key, err := readSecret(path)
	if err == nil {
		if len(key) < minMungeKeyLen || len(key) > mungeKeyLen {
			return nil, fmt.Errorf("secrets: %s holds %d bytes, want %d to %d", path, len(key), minMungeKeyLen, mungeKeyLen)
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key = make([]byte, mungeKeyLen)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("secrets: munge key: %w", err)
	}
	if err := writeAtomic(path, key); err != nil {
		return nil, err
	}
	return key, nil
}

// keyPair loads dir/name and dir/name.pub, or makes and stores a new pair
// when either is missing. The private file is written last: a crash between
// the two leaves a pair that is regenerated whole, before anyone saw it.
func (s *Store) keyPair(dir, name string, typ KeyType, comment string) (KeyPair, error) {
	priv, pub := filepath.Join(dir, name), filepath.Join(dir, name+".pub")
	k, err := loadPair(priv, pub, typ)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	if k, err = s.keygen(s.dir, typ, comment); err != nil {
		return KeyPair{}, err
	}
	if err := writeAtomic(pub, []byte(k.Public+"\n")); err != nil {
		return KeyPair{}, err
	}
	if err := writeAtomic(priv, []byte(k.Private)); err != nil {
		return KeyPair{}, err
	}
	return k, nil
}

func loadPair(priv, pub string, typ KeyType) (KeyPair, error) {
	p, err := readSecret(priv)
	if err != nil {
		return KeyPair{}, err
	}
	q, err := readSecret(pub)
	if err != nil {
		return KeyPair{}, err
	}
	return parsePair(typ, p, q)
}

// readSecret reads a file that must be private to its owner.
func readSecret(path string) ([]byte, error) {
	if err := checkPrivate(path, false); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fs.ErrNotExist
		}
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return b, nil
}

// writeAtomic replaces path with data, 0600: secrets are never group or world readable.
func writeAtomic(path string, data []byte) error {
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	return nil
}
