package spec

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/labcluster/gpucluster/internal/sha256hex"
)

// The canonical forms below are what digests cover: every field that
// changes what a build produces, and nothing that depends on the machine
// (Path, LayersDir). Lists whose order has no effect (dnf installs a set,
// systemctl enables a set) are sorted, so reordering them changes nothing;
// lists whose order matters (commands, files, kernel arguments) keep it.

type canonLayer struct {
	Format      string
	Name        string
	Description string
	Requires    []string
	Packages    []string
	KernelArgs  []string
	Repos       []Repo
	Modules     []string
	Groups      []Group
	Users       []User
	Files       []canonFile
	Services    Services
	Run         []Command
	Roles       map[string]canonRole
}

type canonRole struct {
	Packages   []string
	Services   Services
	Files      []canonFile
	Run        []Command
	KernelArgs []string
}

// canonFile carries the source's content hash instead of its location.
type canonFile struct {
	Path, Source, Content string
	Mode                  uint32
	Owner, Group          string
	SourceSHA256          string
}

// digest hashes l's canonical form; its source files count by their hashes taken at load.
func (l *Layer) digest() string {
	c := canonLayer{Format: "spec.layer/2", Name: l.Name, Description: l.Description,
		Requires: sorted(l.Requires), Packages: sorted(l.Packages), KernelArgs: l.KernelArgs,
		Repos: l.Repos, Modules: sorted(l.Modules.Enable), Groups: l.Groups, Users: l.Users,
		Services: canonServices(l.Services), Run: l.Run, Files: canonFiles(l.Files)}
	for _, role := range sorted(keys(l.Roles)) {
		if c.Roles == nil {
			c.Roles = map[string]canonRole{}
		}
		c.Roles[role] = canonRoleParts(l.Roles[role])
	}
	return hashJSON(c)
}

func canonRoleParts(p RoleParts) canonRole {
	return canonRole{Packages: sorted(p.Packages), Services: canonServices(p.Services),
		Files: canonFiles(p.Files), Run: p.Run, KernelArgs: p.KernelArgs}
}

func canonServices(s Services) Services {
	return Services{Enable: sorted(s.Enable), Disable: sorted(s.Disable)}
}

// canonFiles is files as the digest sees them: a source by the hash taken when it loaded.
func canonFiles(files []File) []canonFile {
	out := make([]canonFile, 0, len(files))
	for _, f := range files {
		out = append(out, canonFile{Path: f.Path, Source: f.Source, SourceSHA256: f.SourceSHA256,
			Content: f.Content, Mode: uint32(f.Mode), Owner: f.Owner, Group: f.Group})
	}
	return out
}

// hashJSON hashes v's JSON encoding, which is canonical for the types
// here: struct fields in declaration order, map keys sorted.
func hashJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("spec: canonical form does not encode: %v", err)) // a bug, not input
	}
	return sha256hex.OfBytes(b)
}

type canonPlan struct {
	Format string
	Image  canonImage
	Layers []canonPlanLayer
	Site   map[string]RepoOverride
}

type canonImage struct {
	Name, Role, ReleaseVer, Arch string
	Layers, KernelArgs           []string
}

type canonPlanLayer struct{ Name, Digest string }

// digest hashes the image, the ordered layers' digests and the site's
// overrides: everything Resolve's result depends on.
func (p *Plan) digest(site *Site) string {
	img := p.Image
	c := canonPlan{Format: "spec.plan/1", Image: canonImage{Name: img.Name, Role: img.Role,
		ReleaseVer: img.ReleaseVer, Arch: img.Arch, Layers: img.Layers, KernelArgs: img.KernelArgs}}
	for _, l := range p.Layers {
		c.Layers = append(c.Layers, canonPlanLayer{l.Name, l.Digest})
	}
	if site != nil && len(site.Repos) > 0 {
		c.Site = site.Repos
	}
	return hashJSON(c)
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
