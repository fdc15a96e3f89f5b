package imgbuild

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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
// A record also names its image file, so that removing or renaming an image frees its trees: a
// build drops the records of the images whose files are gone from its own images directory.
// Records from other directories stay: a CI run in a fresh checkout shares the cache, and the
// record of its previous checkout, deleted since, holds what its next image build reuses.

// keptDir holds the records, <image>.json.
func keptDir(cacheDir string) string { return filepath.Join(cacheDir, "kept") }

// keptRecord is what one image's last build used.
type keptRecord struct {
	ImageFile string   `json:"image_file,omitempty"` // absolute path; "" in records of older versions
	Layers    []string `json:"layers"`               // keys: directory names under <cache>/layers
	RPMs      []string `json:"rpms"`                 // sha256 hex: <cache>/rpms/sha256/<hex>.rpm
	Packed    string   `json:"packed,omitempty"`     // key: directory name under <cache>/packed
}

// recordKept records the layer keys and package hashes that the build of image, from imageFile
// (an absolute path), used: what pruneCache keeps for it. A build with --keep-cache records too,
// so the next pruning keeps its layers. Callers hold the cache lock: a build clears a killed
// writer's temporary file in keptDir whatever its age (leftovers.go).
func recordKept(cacheDir, image, imageFile string, layers []rootfs.Result, packed string, rpmDigests []string) error {
	rec := keptRecord{ImageFile: imageFile, RPMs: slices.Sorted(slices.Values(rpmDigests)), Packed: packed}
	for _, l := range layers {
		rec.Layers = append(rec.Layers, l.Key)
	}
	return writeKept(cacheDir, image, rec)
}

// pruneCache removes the records of images whose files are gone from imagesDir (an absolute
// path), then the layer trees and packages that no record names. Callers hold the cache lock.
func pruneCache(cacheDir, imagesDir string, log logrus.FieldLogger) error {
	records, err := readRecords(cacheDir)
	if err != nil {
		return err
	}
	if err := dropRemovedImages(records, imagesDir, log); err != nil {
		return err
	}
	layers, rpms, packed := keptBy(records)
	trees, err := rootfs.PruneLayers(cacheDir, layers)
	if err != nil {
		return err
	}
	roots, err := prunePacked(cacheDir, packed)
	if err != nil {
		return err
	}
	pkgs, err := resolve.PruneCache(rpmCacheDir(cacheDir), rpms)
	if err != nil {
		return err
	}
	if trees+roots+pkgs > 0 {
		log.WithFields(logrus.Fields{"layers": trees, "packed_roots": roots, "packages": pkgs}).Info("cache: removed what no image's last build used")
	}
	return nil
}

func writeKept(cacheDir, image string, rec keptRecord) error {
	dir := keptDir(cacheDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, image+".json"), append(data, '\n'), 0o644)
}

// dropRemovedImages removes the records whose image file was in imagesDir and is gone, from
// the cache and from records.
func dropRemovedImages(records map[string]keptRecord, imagesDir string, log logrus.FieldLogger) error {
	for path, rec := range records {
		if rec.ImageFile == "" || filepath.Dir(rec.ImageFile) != imagesDir {
			continue
		}
		if _, err := os.Lstat(rec.ImageFile); !errors.Is(err, fs.ErrNotExist) {
			continue // present, or unknown: keep what it may use
		}
		if err := os.Remove(path); err != nil {
			return err
		}
		delete(records, path)
		log.WithField("image_file", rec.ImageFile).Info("cache: the image file is gone; what only its builds used goes too")
	}
	return nil
}

// keptBy returns the layer keys and package hashes the records keep.
func keptBy(records map[string]keptRecord) (layers, rpms, packed map[string]bool) {
	layers, rpms, packed = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, rec := range records {
		if rec.Packed != "" {
			packed[rec.Packed] = true
		}
		for _, k := range rec.Layers {
			layers[k] = true
		}
		for _, d := range rec.RPMs {
			rpms[d] = true
		}
	}
	return layers, rpms, packed
}

// readRecords reads every record, by file. A record that cannot be read stops the pruning
// rather than letting it remove what that image uses.
func readRecords(cacheDir string) (map[string]keptRecord, error) {
	files, err := filepath.Glob(filepath.Join(keptDir(cacheDir), "*.json"))
	if err != nil {
		return nil, err
	}
	records := map[string]keptRecord{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var rec keptRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, fmt.Errorf("cache record %s: %w (remove it, and the cache keeps what the other images use)", f, err)
		}
		records[f] = rec
	}
	return records, nil
}
