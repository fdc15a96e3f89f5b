package imgbuild

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/atomicfile"
	"github.com/labcluster/gpucluster/internal/resolve"
	"github.com/labcluster/gpucluster/internal/rootfs"
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
	layers, rpms, err := readKept(cacheDir)
	if err != nil {
		return err
	}
	trees, err := rootfs.PruneLayers(cacheDir, layers)
	if err != nil {
		return err
	}
	pkgs, err := resolve.PruneCache(filepath.Join(cacheDir, "rpms"), rpms)
	if err != nil {
		return err
	}
	if trees+pkgs > 0 {
		log.WithFields(logrus.Fields{"layer_trees": trees, "packages": pkgs}).Info("cache: removed what no image's last build used")
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

// readKept returns the layer keys and package hashes the records keep. A record that cannot be
// read stops the pruning rather than letting it remove what that image uses.
func readKept(cacheDir string) (layers, rpms map[string]bool, err error) {
	files, err := filepath.Glob(filepath.Join(cacheDir, "kept", "*.json"))
	if err != nil {
		return nil, nil, err
	}
	layers, rpms = map[string]bool{}, map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		var rec keptRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, nil, fmt.Errorf("cache record %s: %w (remove it, and the cache keeps what the other images use)", f, err)
		}
		for _, k := range rec.Layers {
			layers[k] = true
		}
		for _, d := range rec.RPMs {
			rpms[d] = true
		}
	}
	return layers, rpms, nil
}
