package resolve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/labcluster/gpucluster/internal/atomicfile"
	"github.com/labcluster/gpucluster/internal/rpmcmd"
	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// LockFormat is the version of the lock file layout; Read refuses others.
const LockFormat = 2

// LockFile is images/<name>.lock.json (docs/IMGBUILD.md, "Lock file").
type LockFile struct {
	Format          int         `json:"format"`
	Image           string      `json:"image"`
	SpecDigest      string      `json:"spec_digest"`
	SourceDateEpoch int64       `json:"source_date_epoch"`
	ReleaseVer      string      `json:"releasever"`
	Arch            string      `json:"arch"`
	Repos           []LockRepo  `json:"repos"`
	Layers          []LockLayer `json:"layers"`

	path string // where Read found it, for messages
}

// Packages are every layer's packages, in layer order.
func (l *LockFile) Packages() []Package {
	var pkgs []Package
	for _, ly := range l.Layers {
		pkgs = append(pkgs, ly.Packages...)
	}
	return pkgs
}

// LockRepo is a repository as it was when the image was locked.
type LockRepo struct {
	ID      string `json:"id"`
	BaseURL string `json:"baseurl"`
}

// LockLayer is one layer's new packages, sorted by name.
type LockLayer struct {
	Name     string    `json:"name"`
	Digest   string    `json:"digest"`
	Packages []Package `json:"packages"`
}

// Package is one locked RPM.
type Package struct {
	Name     string `json:"name"`
	Epoch    int    `json:"epoch"`
	Version  string `json:"version"`
	Release  string `json:"release"`
	Arch     string `json:"arch"`
	Repo     string `json:"repo"`
	Location string `json:"location"` // relative to the repo's baseurl
	SHA256   string `json:"sha256"`
	// Archive is where the package stays once the mirror has dropped it (the repo's archive
	// template filled in: Rocky's vault, Koji's build); empty where the repo keeps old packages.
	Archive string `json:"archive,omitempty"`
}

// NEVRA is the package's rpmcmd.Header.NEVRA, the key of Fetch's result.
func (p Package) NEVRA() string {
	return rpmcmd.Header{Name: p.Name, Epoch: p.Epoch, Version: p.Version, Release: p.Release, Arch: p.Arch}.NEVRA()
}

// Bytes is the lock's canonical encoding: indented JSON, fields in a fixed
// order, packages sorted, a final newline. Equal locks give equal bytes.
func (l *LockFile) Bytes() ([]byte, error) {
	c := *l
	c.Format = LockFormat
	// Copies: the encoding sorts, and must not reorder the caller's lock.
	c.Layers = append([]LockLayer{}, l.Layers...)
	for i := range c.Layers {
		c.Layers[i].Packages = sortedPackages(c.Layers[i].Packages)
	}
	if c.Repos == nil {
		c.Repos = []LockRepo{} // [] rather than null
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(&c); err != nil {
		return nil, fmt.Errorf("encode lock: %w", err)
	}
	return b.Bytes(), nil
}

func sortedPackages(ps []Package) []Package {
	out := append([]Package{}, ps...)
	sort.Slice(out, func(i, j int) bool { return packageLess(out[i], out[j]) })
	return out
}

func packageLess(a, b Package) bool {
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.NEVRA() < b.NEVRA()
}

// Digest is the sha256 of the canonical encoding, "sha256:<hex>".
func (l *LockFile) Digest() string {
	b, err := l.Bytes()
	if err != nil {
		return ""
	}
	return "sha256:" + sha256hex.OfBytes(b)
}

// Write writes the lock atomically: a temporary file in the same
// directory, synced, then renamed over path, so a reader never sees half a
// lock.
func (l *LockFile) Write(p string) error {
	if err := l.validate(); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	b, err := l.Bytes()
	if err != nil {
		return err
	}
	return atomicfile.Write(p, b, 0o644)
}

// Read reads and checks a lock file: unknown fields, a missing field, an
// unknown format, a package of an unlisted repo, a bad sha256 or location
// are errors naming the place.
func Read(p string) (*LockFile, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read lock: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var l LockFile
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: data after the lock object", p)
	}
	if l.Format != LockFormat {
		return nil, fmt.Errorf("%s: format %d, this imgbuild reads format %d; run imgbuild lock again", p, l.Format, LockFormat)
	}
	if err := l.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	l.path = p
	return &l, nil
}

var (
	digestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

func (l *LockFile) validate() error {
	if l.Image == "" {
		return errors.New("image: missing")
	}
	if !digestRe.MatchString(l.SpecDigest) {
		return fmt.Errorf("spec_digest %q: want sha256:<64 hex digits>", l.SpecDigest)
	}
	if l.SourceDateEpoch <= 0 {
		// rpm takes 0 for unset and records the build's own time: builds would differ.
		return fmt.Errorf("source_date_epoch: %d is not a positive Unix time", l.SourceDateEpoch)
	}
	repos, err := l.repoSet()
	if err != nil {
		return err
	}
	if len(l.Layers) == 0 {
		return errors.New("layers: none")
	}
	layers := map[string]bool{}
	owner := map[string]string{} // NEVRA -> layer
	for i, ly := range l.Layers {
		where := fmt.Sprintf("layers[%d] (%s)", i, ly.Name)
		if ly.Name == "" || layers[ly.Name] {
			return fmt.Errorf("%s: name missing or repeated", where)
		}
		layers[ly.Name] = true
		for j, p := range ly.Packages {
			pw := fmt.Sprintf("%s: packages[%d] (%s)", where, j, p.Name)
			if err := p.validate(repos); err != nil {
				return fmt.Errorf("%s: %w", pw, err)
			}
			if j > 0 && !packageLess(ly.Packages[j-1], p) {
				return fmt.Errorf("%s: packages not sorted by name or repeated", pw)
			}
			if prev, ok := owner[p.NEVRA()]; ok {
				return fmt.Errorf("%s: already locked by layer %s", pw, prev)
			}
			owner[p.NEVRA()] = ly.Name
		}
	}
	return nil
}

func (l *LockFile) repoSet() (map[string]bool, error) {
	repos := map[string]bool{}
	for i, r := range l.Repos {
		if r.ID == "" || r.BaseURL == "" {
			return nil, fmt.Errorf("repos[%d]: id and baseurl required", i)
		}
		if repos[r.ID] {
			return nil, fmt.Errorf("repos[%d]: id %q repeated", i, r.ID)
		}
		repos[r.ID] = true
	}
	return repos, nil
}

func (p Package) validate(repos map[string]bool) error {
	for _, f := range []struct{ name, v string }{
		{"name", p.Name}, {"version", p.Version}, {"release", p.Release},
		{"arch", p.Arch}, {"repo", p.Repo}, {"location", p.Location},
	} {
		if f.v == "" {
			return fmt.Errorf("%s: missing", f.name)
		}
	}
	if p.Epoch < 0 {
		return fmt.Errorf("epoch %d: negative", p.Epoch)
	}
	if !repos[p.Repo] {
		return fmt.Errorf("repo %q: not in repos", p.Repo)
	}
	if !sha256hex.Valid(p.SHA256) {
		return fmt.Errorf("sha256 %q: want 64 lowercase hex digits", p.SHA256)
	}
	if err := checkArchiveURL(p.Archive); err != nil {
		return err
	}
	return checkLocation(p.Location)
}

// checkArchiveURL wants an absolute http, https or file URL, or nothing.
func checkArchiveURL(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "file") || u.Path == "" {
		return fmt.Errorf("archive %q: want an absolute http, https or file URL", raw)
	}
	return nil
}

// checkLocation keeps a location inside its repository: relative, clean,
// no scheme, no "..".
func checkLocation(loc string) error {
	if strings.HasPrefix(loc, "/") || strings.Contains(loc, "://") || strings.Contains(loc, "\\") ||
		path.Clean(loc) != loc || loc == ".." || strings.HasPrefix(loc, "../") {
		return fmt.Errorf("location %q: want a clean path relative to the repo's baseurl", loc)
	}
	return nil
}

// LayerRef names a layer and its definition digest, to tell which layers
// changed since a lock was made.
type LayerRef struct {
	Name   string
	Digest string
}

// StaleError is a lock that no longer matches its image and layers.
type StaleError struct {
	LockPath string
	SpecPath string
	Changed  []string // what differs
	// Inconsistent: the spec digest is current but the layers are not the image's, so the lock
	// was edited or merged by hand.
	Inconsistent bool
}

func (e *StaleError) Error() string {
	msg := e.LockPath + " is stale: the layers or image changed since it was locked"
	if e.Inconsistent {
		msg = e.LockPath + " does not match its image: its spec_digest is current but its layers are not the image's"
	}
	return msg + " (" + strings.Join(e.Changed, "; ") + "); run imgbuild lock " + e.SpecPath
}

// CheckFresh refuses a lock whose spec digest is not specDigest or whose layers are not
// layers: the same count, names, order and digests. Builds then take the lock's layers one to
// one for the image's. The error names the layers added, removed, reordered or changed.
func (l *LockFile) CheckFresh(specDigest string, layers []LayerRef) error {
	changed := l.changedLayers(layers)
	if len(changed) == 0 && l.SpecDigest == specDigest {
		return nil
	}
	lockPath := l.path
	if lockPath == "" {
		lockPath = "images/" + l.Image + ".lock.json"
	}
	e := &StaleError{
		LockPath:     lockPath,
		SpecPath:     strings.TrimSuffix(lockPath, ".lock.json") + ".toml",
		Changed:      changed,
		Inconsistent: l.SpecDigest == specDigest,
	}
	if len(changed) == 0 {
		e.Changed = []string{"image definition or input files changed"}
	}
	return e
}

// changedLayers says how the lock's layers differ from layers; nothing when they are the same.
func (l *LockFile) changedLayers(layers []LayerRef) []string {
	if sameLayers(l.Layers, layers) {
		return nil
	}
	locked := map[string]string{}
	var lockedOrder, nowOrder []string
	for _, ly := range l.Layers {
		locked[ly.Name] = ly.Digest
		lockedOrder = append(lockedOrder, ly.Name)
	}
	var out []string
	now := map[string]bool{}
	for _, ly := range layers {
		now[ly.Name] = true
		nowOrder = append(nowOrder, ly.Name)
		d, ok := locked[ly.Name]
		switch {
		case !ok:
			out = append(out, "layer "+ly.Name+" added")
		case d != ly.Digest:
			out = append(out, "layer "+ly.Name+" changed")
		}
	}
	for _, n := range lockedOrder {
		if !now[n] {
			out = append(out, "layer "+n+" removed")
		}
	}
	if len(out) == 0 && strings.Join(lockedOrder, ",") != strings.Join(nowOrder, ",") {
		out = append(out, "layer order changed")
	}
	if len(out) == 0 { // a name repeated on one side only: no lock Read accepts has that
		out = append(out, "layers differ")
	}
	return out
}

func sameLayers(locked []LockLayer, layers []LayerRef) bool {
	if len(locked) != len(layers) {
		return false
	}
	for i, ly := range layers {
		if locked[i].Name != ly.Name || locked[i].Digest != ly.Digest {
			return false
		}
	}
	return true
}
