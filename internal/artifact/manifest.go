package artifact

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// ManifestFile is the name of the manifest inside a version directory.
const ManifestFile = "manifest.json"

// maxManifestSize bounds what Open reads: a real manifest is a few KiB, and a
// bound keeps a garbage file from costing memory.
const maxManifestSize = 1 << 20

// maxNameLen is NAME_MAX: every name we accept is one path element.
const maxNameLen = 255

// Manifest is manifest.json. Field order is the JSON key order, and Files is
// a map, which encoding/json writes sorted, so the encoding is stable.
type Manifest struct {
	Name    string          `json:"name"`
	Version string          `json:"version"`
	Created time.Time       `json:"created"`
	Kernel  Kernel          `json:"kernel"`
	Initrds []string        `json:"initrds"`
	Rootfs  *Rootfs         `json:"rootfs,omitempty"`
	Cmdline string          `json:"cmdline"`
	Files   map[string]File `json:"files"`
	Layers  []Layer         `json:"layers"`
	Lock    string          `json:"lock"`
	// Extras are other files shipped with the version, e.g. the lock it was built from, so
	// versions can be compared without the build machine.
	Extras []string `json:"extras,omitempty"`
}

// Kernel names the kernel file and the release it was built for.
type Kernel struct {
	File    string `json:"file"`
	Release string `json:"release"`
}

// Rootfs names the root file system image and its format (e.g. "squashfs"), and, when the
// version was published with one, the casync index (.caibx) of the image's chunks: a listed file
// of the version, whose chunks are in the chunk store shared by every version (ChunkStoreDir).
type Rootfs struct {
	File   string `json:"file"`
	Format string `json:"format"`
	Index  string `json:"index,omitempty"`
}

// File is what a reader checks a file against.
type File struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Layer is one build layer, in build order.
type Layer struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// Referenced returns the version's files, in order: kernel, initrds in load
// order, the rootfs and its chunk index if any, then the extras.
func (m Manifest) Referenced() []string {
	refs := []string{m.Kernel.File}
	refs = append(refs, m.Initrds...)
	if m.Rootfs != nil {
		refs = append(refs, m.Rootfs.File)
		if m.Rootfs.Index != "" {
			refs = append(refs, m.Rootfs.Index)
		}
	}
	return append(refs, m.Extras...)
}

// Encode returns manifest.json's bytes: 2-space indent, trailing newline,
// Created in UTC and nil lists as [] so equal manifests encode equally.
func (m Manifest) Encode() ([]byte, error) {
	m.Created = m.Created.UTC()
	if m.Initrds == nil {
		m.Initrds = []string{}
	}
	if m.Layers == nil {
		m.Layers = []Layer{}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// decodeManifest parses manifest.json. Unknown keys are allowed because the
// contract says the manifest carries "at least" these fields: a newer imgbuild
// may add some without breaking an older bootd.
func decodeManifest(data []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("parse %s: %w", ManifestFile, err)
	}
	return m, nil
}

// Validate checks what a reader relies on: safe names, required fields, and
// every referenced file listed in Files with a well-formed size and digest.
func (m Manifest) Validate() error {
	if err := checkName("name", m.Name); err != nil {
		return err
	}
	if err := checkName("version", m.Version); err != nil {
		return err
	}
	if m.Created.IsZero() {
		return errors.New("created is missing")
	}
	if err := m.checkBootFields(); err != nil {
		return err
	}
	if err := m.checkFiles(); err != nil {
		return err
	}
	return m.checkLayers()
}

func (m Manifest) checkBootFields() error {
	if m.Kernel.File == "" {
		return errors.New("kernel.file is missing")
	}
	if len(m.Initrds) == 0 {
		return errors.New("initrds is empty")
	}
	if m.Rootfs != nil && (m.Rootfs.File == "" || m.Rootfs.Format == "") {
		return errors.New("rootfs needs both file and format")
	}
	seen := map[string]bool{}
	for _, ref := range m.Referenced() {
		if err := checkFileName(ref); err != nil {
			return err
		}
		if seen[ref] {
			return fmt.Errorf("file %q is referenced twice", ref)
		}
		seen[ref] = true
		if _, ok := m.Files[ref]; !ok {
			return fmt.Errorf("file %q is referenced but not listed in files", ref)
		}
	}
	return nil
}

func (m Manifest) checkFiles() error {
	for _, name := range slices.Sorted(maps.Keys(m.Files)) {
		if err := checkFileName(name); err != nil {
			return err
		}
		f := m.Files[name]
		if f.Size < 0 {
			return fmt.Errorf("file %q: negative size %d", name, f.Size)
		}
		if !sha256hex.Valid(f.SHA256) {
			return fmt.Errorf("file %q: sha256 %q is not 64 lowercase hex digits", name, f.SHA256)
		}
	}
	return nil
}

func (m Manifest) checkLayers() error {
	for i, l := range m.Layers {
		if l.Name == "" || l.Digest == "" {
			return fmt.Errorf("layer %d needs both name and digest", i)
		}
	}
	return nil
}

// CheckVersion checks a version name by the rule Validate applies to it, so that a builder can
// refuse a bad one before the hours of work that Write would otherwise refuse at the end.
func CheckVersion(v string) error { return checkName("version", v) }

// checkName accepts a single safe path element: [A-Za-z0-9._-], not starting
// with '.', so it can never be "..", a hidden temp dir, or contain a '/'.
func checkName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s is missing", what)
	}
	if len(s) > maxNameLen {
		return fmt.Errorf("%s is longer than %d bytes", what, maxNameLen)
	}
	if s[0] == '.' {
		return fmt.Errorf("%s %q starts with '.'", what, s)
	}
	// "a..b" is harmless as one element, but no name needs it and refusing
	// it keeps "never contains .." a simple property to check.
	if strings.Contains(s, "..") {
		return fmt.Errorf("%s %q contains \"..\"", what, s)
	}
	for i := 0; i < len(s); i++ {
		if !safeByte(s[i]) {
			return fmt.Errorf("%s %q has a character outside [A-Za-z0-9._-]", what, s)
		}
	}
	return nil
}

// checkFileName is checkName plus: manifest.json is never a listed file,
// because the manifest cannot carry its own digest.
func checkFileName(s string) error {
	if err := checkName("file name", s); err != nil {
		return err
	}
	if s == ManifestFile {
		return fmt.Errorf("file name %q is reserved", s)
	}
	return nil
}

func safeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}
