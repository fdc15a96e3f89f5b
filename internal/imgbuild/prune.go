package imgbuild

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/atomicfile"
	"github.com/labcluster/gpucluster/internal/rootfs"
	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// The cache keeps what each image's last build used and no more. Every layer that changes adds a
// tree to <cache>/layers, a full copy of its parent on file systems without reflink: a lab
// building a multi-GB CUDA image every week would fill its disk. After a build, the layer keys
// and package hashes it used are recorded under <cache>/kept/<image>.json, and whatever no
// image's record names is removed: the next build of each image from the same lock and layers
// reuses all it did before; a build from an older lock fetches and builds again what it needs.

// keptRecord is what one image's last build used.
type keptRecord struct {
	Layers []string `json:"layers"` // keys: directory names under <cache>/layers
	RPMs   []string `json:"rpms"`   // sha256 hex: <cache>/rpms/sha256/<hex>.rpm
}

// recordKept records the layer keys and package hashes that image's build used: what pruneCache
// keeps for it. A build with --keep-cache records too, so the next pruning keeps its layers.
func recordKept(cacheDir, image string, layers []rootfs.Result, rpmDigests []string) error {
	rec := keptRecord{RPMs: slices.Sorted(slices.Values(rpmDigests))}
	for _, l := range layers {
		rec.Layers = append(rec.Layers, l.Key)
	}
	return writeKept(cacheDir, image, rec)
}

// pruneCache removes the layer trees and packages that no image's record names. Callers hold the
// cache lock.
func pruneCache(cacheDir string, log logrus.FieldLogger) error {
	keep, err := readKept(cacheDir)
	if err != nil {
		return err
	}
	trees, err := removeUnkept(filepath.Join(cacheDir, "layers"), keep, func(name string) bool { return sha256hex.Valid(name) }, removeTree)
	if err != nil {
		return err
	}
	rpms, err := removeUnkept(filepath.Join(cacheDir, "rpms", "sha256"), keep, func(name string) bool {
		hex, ok := strings.CutSuffix(name, ".rpm")
		return ok && sha256hex.Valid(hex)
	}, os.Remove)
	if err != nil {
		return err
	}
	if trees+rpms > 0 {
		log.WithFields(logrus.Fields{"layer_trees": trees, "packages": rpms}).Info("cache: removed what no image's last build used")
	}
	return nil
}

func writeKept(cacheDir, image string, rec keptRecord) error {
	dir := filepath.Join(cacheDir, "kept")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, image+".json"), append(data, '\n'), 0o644)
}

// readKept returns the names every record keeps: layer keys and "<hex>.rpm" file names. A record
// that cannot be read stops the pruning rather than letting it remove what that image uses.
func readKept(cacheDir string) (map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(cacheDir, "kept", "*.json"))
	if err != nil {
		return nil, err
	}
	keep := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var rec keptRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, fmt.Errorf("cache record %s: %w (remove it, and the cache keeps what the other images use)", f, err)
		}
		for _, k := range rec.Layers {
			keep[k] = true
		}
		for _, d := range rec.RPMs {
			keep[d+".rpm"] = true
		}
	}
	return keep, nil
}

// removeUnkept removes, with remove, the entries of dir that ours accepts (a cache entry's name,
// never a build's scratch directory or a file someone put there) and keep does not name.
func removeUnkept(dir string, keep map[string]bool, ours func(string) bool, remove func(string) error) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, e := range entries {
		if !ours(e.Name()) || keep[e.Name()] {
			continue
		}
		if err := remove(filepath.Join(dir, e.Name())); err != nil {
			return removed, fmt.Errorf("cache: remove %s: %w", e.Name(), err)
		}
		removed++
	}
	return removed, nil
}

// removeTree takes a layer tree out of the cache before removing it: a removal cut short (a
// killed imgbuild, a file that cannot be removed) must not leave a partial tree under its key,
// which a later build would take for the finished layer. The scratch name is one CleanStale
// clears at the next build.
func removeTree(path string) error {
	scratch := filepath.Join(filepath.Dir(path), ".build-pruned-"+filepath.Base(path))
	if err := os.Rename(path, scratch); err != nil {
		return err
	}
	return os.RemoveAll(scratch)
}
