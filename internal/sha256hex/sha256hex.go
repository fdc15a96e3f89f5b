// Package sha256hex computes and recognises sha256 digests in the one form the project writes
// them everywhere (manifests, lock files, layer digests, boot scripts, the names in its
// content-addressed caches): 64 lowercase hex digits.
package sha256hex

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Of returns the digest of everything r yields, and how many bytes that was.
func Of(r io.Reader) (sum string, n int64, err error) {
	h := sha256.New()
	n, err = io.Copy(h, r)
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// OfBytes returns the digest of b.
func OfBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// File returns the digest of the file at path. Its errors wrap the file system's, so
// errors.Is(err, fs.ErrNotExist) still tells a missing file.
func File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash: %w", err)
	}
	defer f.Close()
	sum, _, err := Of(f)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return sum, nil
}

// Valid reports whether s is a digest in that form.
func Valid(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Prune removes, with remove, the entries of dir named by a digest (plus suffix) that keep does
// not hold, and returns how many it removed. Other names are left: scratch and partial files.
// A missing dir holds nothing to prune.
func Prune(dir, suffix string, keep map[string]bool, remove func(path, sum string) error) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, e := range entries {
		sum, ok := strings.CutSuffix(e.Name(), suffix)
		if !ok || !Valid(sum) || keep[sum] {
			continue
		}
		if err := remove(filepath.Join(dir, e.Name()), sum); err != nil {
			return removed, err
		}
		removed++
	}
	return removed, nil
}
