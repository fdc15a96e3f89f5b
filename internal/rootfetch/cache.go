package rootfetch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/folbricht/desync"

	"github.com/labcluster/gpucluster/internal/atomicfile"
)

// Cache is a directory of checked root images on a node's cache disk, each named by its sha256
// (<sha256>.img) beside its index (<sha256>.caibx): the images a node booted, kept so that the
// next boot of the same version fetches nothing and a new version fetches only what they lack.
type Cache struct {
	Dir  string
	Keep int // versions kept after a new one is stored (the new one included); 0: 2
}

const (
	imgExt     = ".img"
	indexExt   = ".caibx"
	partialExt = ".partial"
)

// Image is where the version with this sha256 is (or will be) kept.
func (c Cache) Image(sum string) string { return filepath.Join(c.Dir, sum+imgExt) }

// Index is where its index is kept.
func (c Cache) Index(sum string) string { return filepath.Join(c.Dir, sum+indexExt) }

// Partial is where a fetch of it writes until the image checks out.
func (c Cache) Partial(sum string) string { return filepath.Join(c.Dir, sum+partialExt) }

// Lookup reports whether the cache holds the image with sha256 sum, reading it whole to check:
// a damaged copy (the disk, a crash) is reported absent, so the boot fetches it anew; it stays
// until then, a seed for its own chunks that still check (Damaged).
func (c Cache) Lookup(sum string) (bool, error) {
	f, err := os.Open(c.Image(sum))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err == nil && hex.EncodeToString(h.Sum(nil)) == sum {
		if _, err := os.Stat(c.Index(sum)); err == nil {
			return true, nil
		}
	}
	return false, nil
}

// Damaged is the copy of sum that Lookup found damaged, as a seed (each chunk is checked before
// use: only the damaged ones are fetched), when there is one with its index.
func (c Cache) Damaged(sum string) []Seed {
	for _, p := range []string{c.Image(sum), c.Index(sum)} {
		if _, err := os.Stat(p); err != nil {
			return nil
		}
	}
	return []Seed{{File: c.Image(sum), Index: c.Index(sum)}}
}

// Seeds are the versions held, newest first, for a fetch of another.
func (c Cache) Seeds(except string) []Seed {
	var out []Seed
	for _, sum := range c.held() {
		if sum != except {
			out = append(out, Seed{File: c.Image(sum), Index: c.Index(sum)})
		}
	}
	return out
}

// held lists the complete versions, newest first.
func (c Cache) held() []string {
	des, err := os.ReadDir(c.Dir)
	if err != nil {
		return nil
	}
	type v struct {
		sum string
		t   time.Time
	}
	var vs []v
	for _, de := range des {
		sum, ok := strings.CutSuffix(de.Name(), imgExt)
		if !ok || len(sum) != 64 {
			continue
		}
		if _, err := os.Stat(c.Index(sum)); err != nil {
			continue
		}
		if fi, err := de.Info(); err == nil {
			vs = append(vs, v{sum, fi.ModTime()})
		}
	}
	slices.SortFunc(vs, func(a, b v) int { return b.t.Compare(a.t) })
	out := make([]string, len(vs))
	for i, x := range vs {
		out[i] = x.sum
	}
	return out
}

// Store makes the partial image of sum (checked by the fetch) a kept version with its index,
// then prunes to Keep versions, the new one first.
func (c Cache) Store(sum string, idx desync.Index) error {
	f, err := os.Create(c.Index(sum) + partialExt)
	if err != nil {
		return err
	}
	_, err = idx.WriteTo(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(c.Index(sum)+partialExt, c.Index(sum))
	}
	if err == nil {
		err = syncFile(c.Partial(sum))
	}
	if err == nil {
		err = os.Rename(c.Partial(sum), c.Image(sum))
	}
	if err != nil {
		return fmt.Errorf("cache %s: %w", sum, err)
	}
	now := time.Now()
	_ = os.Chtimes(c.Image(sum), now, now) // the newest, whatever the fetch's order
	if err := atomicfile.SyncDir(c.Dir); err != nil {
		return err
	}
	c.prune(sum)
	return nil
}

// Touch marks a version as just used (a cache hit), so pruning keeps it.
func (c Cache) Touch(sum string) {
	now := time.Now()
	_ = os.Chtimes(c.Image(sum), now, now)
}

// prune keeps the Keep newest versions, current among them, and removes partial files of others.
func (c Cache) prune(current string) {
	keep := c.Keep
	if keep <= 0 {
		keep = 2
	}
	kept := 1
	for _, sum := range c.held() {
		if sum == current {
			continue
		}
		if kept < keep {
			kept++
			continue
		}
		c.remove(sum)
	}
	matches, _ := filepath.Glob(filepath.Join(c.Dir, "*"+partialExt))
	for _, m := range matches {
		if !strings.HasPrefix(filepath.Base(m), current) {
			os.Remove(m)
		}
	}
}

func (c Cache) remove(sum string) {
	for _, p := range []string{c.Image(sum), c.Index(sum), c.Image(sum) + HaveSuffix} {
		os.Remove(p)
	}
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteFullHave writes a have-map listing every chunk of idx as held: for an image checked whole
// (a cache hit), which the node serves to its peers.
func WriteFullHave(path string, idx desync.Index) error {
	h, err := newHaveMap(path, len(idx.Chunks))
	if err != nil {
		return err
	}
	for pos := range idx.Chunks {
		h.bits[pos/8] |= 1 << (pos % 8)
	}
	_, err = h.f.WriteAt(h.bits[:len(h.bits)/2], 0)
	if cerr := h.close(); err == nil {
		err = cerr
	}
	return err
}
