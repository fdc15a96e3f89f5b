package spec

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Plan is an image resolved against its layers: what the build applies.
type Plan struct {
	Image  *Image
	Layers []*Layer // in build order, each with the image's role merged in
	Digest string   // sha256 (hex) over the image, the ordered layer digests and the site overrides

	site *Site // for RepoKeyWhere
}

// Resolve loads the image's layers from layersDir, orders them, applies
// the image's role (each returned Layer has its role's parts merged in and
// no Roles left; its Digest covers the merged definition) and site's repo
// overrides (site may be nil), and checks that no two layers provide the
// same thing. Errors name the file, line and key at fault.
func Resolve(img *Image, layersDir string, site *Site) (*Plan, error) {
	rs := &resolver{dir: layersDir, img: img, loaded: map[string]*Layer{}}
	order, err := rs.order()
	if err != nil {
		return nil, err
	}
	if err := checkProviders(order, img.Role); err != nil {
		return nil, err
	}
	if err := checkUserGroups(order); err != nil {
		return nil, err
	}
	p := &Plan{Image: img, site: site}
	for _, l := range order {
		p.Layers = append(p.Layers, l.withRole(img, site))
	}
	if err := rs.checkSite(p, site); err != nil {
		return nil, err
	}
	if err := checkRepoArch(p, site); err != nil {
		return nil, err
	}
	if err := checkRepoKeys(p, site); err != nil {
		return nil, err
	}
	p.Digest = p.digest(site)
	return p, nil
}

// resolver finds the layers of one image.
type resolver struct {
	dir    string
	img    *Image
	loaded map[string]*Layer
}

// load returns layer name, loaded once. A missing file is blamed on the
// key (linePath, spelled key in the message) that asked for it.
func (rs *resolver) load(name, file string, paths map[string]int, linePath, key string) (*Layer, error) {
	if l, ok := rs.loaded[name]; ok {
		return l, nil
	}
	if msg := checkName(name); msg != "" {
		return nil, errorAt(file, paths, linePath, key, "%s", msg) // never a path out of dir
	}
	path := filepath.Join(rs.dir, name+".toml")
	l, err := LoadLayer(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, statErr := os.Stat(path); errors.Is(statErr, fs.ErrNotExist) {
			return nil, errorAt(file, paths, linePath, key, "no layer %q (no %s)", name, path)
		}
	}
	if err != nil {
		return nil, err
	}
	rs.loaded[name] = l
	return l, nil
}

// order returns the image's layers in build order: the requires graph
// sorted topologically, ties broken by the image's list, with each
// required layer the image does not list placed before its first dependant.
func (rs *resolver) order() ([]*Layer, error) {
	var listed []*Layer
	for i, name := range rs.img.Layers {
		l, err := rs.load(name, rs.img.Path, rs.img.paths, item("layers", i), "layers")
		if err != nil {
			return nil, err
		}
		listed = append(listed, l)
	}
	var ext []*Layer // listed layers, each preceded by the unlisted ones it needs
	seen := map[string]bool{}
	for _, l := range listed {
		var err error
		if ext, err = rs.addUnlisted(ext, l, seen); err != nil {
			return nil, err
		}
		ext = append(ext, l)
	}
	return topoSort(ext, rs.img.Layers)
}

// addUnlisted appends the layers l requires that the image does not list
// and that are not in ext yet, dependencies first.
func (rs *resolver) addUnlisted(ext []*Layer, l *Layer, seen map[string]bool) ([]*Layer, error) {
	for i, name := range l.Requires {
		if slices.Contains(rs.img.Layers, name) || seen[name] {
			continue
		}
		seen[name] = true
		req, err := rs.load(name, l.Path, l.paths, item("requires", i), "requires")
		if err != nil {
			return nil, err
		}
		if ext, err = rs.addUnlisted(ext, req, seen); err != nil {
			return nil, err
		}
		ext = append(ext, req)
	}
	return ext, nil
}

// topoSort orders layers so that each comes after those it requires,
// otherwise keeping the order given (Kahn's algorithm, earliest first).
// A cycle is named from the image's point of view: starting at the first
// listed layer caught in it, or depending on it.
func topoSort(layers []*Layer, listed []string) ([]*Layer, error) {
	done := map[string]bool{}
	var out []*Layer
	for len(out) < len(layers) {
		next := -1
		for i, l := range layers {
			if !done[l.Name] && allDone(l.Requires, done) {
				next = i
				break
			}
		}
		if next < 0 {
			return nil, cycleError(layers, done, listed)
		}
		done[layers[next].Name] = true
		out = append(out, layers[next])
	}
	return out, nil
}

func allDone(names []string, done map[string]bool) bool {
	for _, n := range names {
		if !done[n] {
			return false
		}
	}
	return true
}

// cycleError follows requires among the layers not done, from the first
// listed one, until a layer repeats, and names the cycle.
func cycleError(layers []*Layer, done map[string]bool, listed []string) error {
	byName := map[string]*Layer{}
	for _, l := range layers {
		if !done[l.Name] {
			byName[l.Name] = l
		}
	}
	var start *Layer
	for _, name := range listed {
		if start == nil && byName[name] != nil {
			start = byName[name]
		}
	}
	var path []*Layer
	req := map[*Layer]int{} // index in Requires of the edge followed
	for l := start; !slices.Contains(path, l); {
		path = append(path, l)
		for i, name := range l.Requires {
			if next, ok := byName[name]; ok {
				req[l] = i
				l = next
				break
			}
		}
	}
	first := path[len(path)-1]
	first = byName[first.Requires[req[first]]]
	cycle := path[slices.Index(path, first):]
	names := make([]string, 0, len(cycle)+1)
	for _, l := range cycle {
		names = append(names, l.Name)
	}
	names = append(names, first.Name)
	return errorAt(first.Path, first.paths, item("requires", req[first]), "requires",
		"cycle %s", strings.Join(names, " -> "))
}

// withRole returns a copy of l with the parts of the image's role merged in, the site's
// overrides applied to its repos, and their URLs' variables filled in.
func (l *Layer) withRole(img *Image, site *Site) *Layer {
	role := img.Role
	c := *l
	p := l.Roles[role]
	c.Packages = slices.Concat(l.Packages, p.Packages)
	c.Services = Services{Enable: slices.Concat(l.Services.Enable, p.Services.Enable),
		Disable: slices.Concat(l.Services.Disable, p.Services.Disable)}
	c.Files = slices.Concat(l.Files, p.Files)
	c.Run = slices.Concat(l.Run, p.Run)
	c.KernelArgs = slices.Concat(l.KernelArgs, p.KernelArgs)
	c.Roles = nil
	// The digest leaves out site overrides: a mirror serves the same
	// packages, and the lock pins them by sha256.
	c.Digest = c.digest()
	c.Repos = make([]Repo, len(l.Repos))
	for i, r := range l.Repos {
		c.Repos[i] = site.apply(r).expand(img)
	}
	return &c
}

// checkSite wants every repo the site overrides to exist: in the image,
// or at least in some layer, since one site file serves all images.
func (rs *resolver) checkSite(p *Plan, site *Site) error {
	if site == nil {
		return nil
	}
	for _, id := range keys(site.Repos) {
		if hasRepo(p.Layers, id) || rs.anyLayerHasRepo(id) {
			continue
		}
		return errorAt(site.path, site.paths, "repos."+id, "repos."+id,
			"no layer in %s defines repo %q", rs.dir, id)
	}
	return nil
}

// checkRepoArch refuses a repo whose baseurl names another architecture than the image's (a
// path segment such as x86_64 in an aarch64 image): dnf, told the image's architecture, would
// find none of the layer's packages there and say only "No match for argument". The error
// points at the baseurl that names it, the site's when the site overrides it.
func checkRepoArch(p *Plan, site *Site) error {
	for _, l := range p.Layers {
		for i, r := range l.Repos {
			u, err := url.Parse(r.BaseURL)
			if err != nil {
				continue // checked at load
			}
			segs := strings.Split(u.Path, "/")
			other := slices.IndexFunc(segs, func(seg string) bool {
				return seg != p.Image.Arch && slices.Contains(arches, seg)
			})
			if other < 0 {
				continue
			}
			msg := "repo %q is for %s (its baseurl says so), but image %s is %s: give this image a layer, or a site mirror, for its own architecture"
			args := []any{r.ID, segs[other], p.Image.Name, p.Image.Arch}
			if o, ok := site.override(r.ID); ok && o.BaseURL != nil {
				key := "repos." + r.ID + ".baseurl"
				return errorAt(site.path, site.paths, key, key, msg, args...)
			}
			key := item("repos", i) + ".baseurl"
			return errorAt(l.Path, l.paths, key, key, msg, args...)
		}
	}
	return nil
}

// checkRepoKeys refuses a repo that checks signatures (gpgcheck defaults to true) without a
// gpgkey, after the site's overrides: dnf would refuse it only at lock time, naming no file.
func checkRepoKeys(p *Plan, site *Site) error {
	for _, l := range p.Layers {
		for i, r := range l.Repos {
			if !r.GPGCheck || r.GPGKey != "" {
				continue
			}
			msg := "repo %q checks signatures (gpgcheck is on unless turned off) but names no gpgkey: give the URL of its signing key"
			if o, ok := site.override(r.ID); ok && o.GPGKey != nil {
				key := "repos." + r.ID + ".gpgkey"
				return errorAt(site.path, site.paths, key, key, msg, r.ID)
			}
			return errorAt(l.Path, l.paths, item("repos", i), item("repos", i), msg, r.ID)
		}
	}
	return nil
}

// RepoKeyWhere is where repo id's gpgkey is written, "file:line: key", the site's when the
// site sets it: what a lock that fails on the repo's signatures names.
func (p *Plan) RepoKeyWhere(id string) string {
	for _, l := range p.Layers {
		for i, r := range l.Repos {
			if r.ID != id {
				continue
			}
			key := item("repos", i) + ".gpgkey"
			if _, ok := l.paths[key]; !ok {
				key = item("repos", i)
			}
			where := errorAt(l.Path, l.paths, key, key, "").Error()
			if o, ok := p.site.override(id); ok && o.GPGKey != nil {
				k := "repos." + id + ".gpgkey"
				where = errorAt(p.site.path, p.site.paths, k, k, "").Error()
			}
			return strings.TrimSuffix(where, ": ")
		}
	}
	return "repo " + id
}

func hasRepo(layers []*Layer, id string) bool {
	for _, l := range layers {
		for _, r := range l.Repos {
			if r.ID == id {
				return true
			}
		}
	}
	return false
}

// anyLayerHasRepo looks through every layer file; those that fail to load
// are reported when an image uses them, not here.
func (rs *resolver) anyLayerHasRepo(id string) bool {
	files, _ := filepath.Glob(filepath.Join(rs.dir, "*.toml"))
	for _, f := range files {
		if l, err := LoadLayer(f); err == nil && hasRepo([]*Layer{l}, id) {
			return true
		}
	}
	return false
}
