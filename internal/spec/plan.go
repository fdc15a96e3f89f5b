package spec

import "slices"

// Repos returns the repos of all layers in layer order, each id once.
// Resolve has checked that layers sharing an id define it alike.
func (p *Plan) Repos() []Repo {
	var repos []Repo
	seen := map[string]bool{}
	for _, l := range p.Layers {
		for _, r := range l.Repos {
			if !seen[r.ID] {
				seen[r.ID] = true
				repos = append(repos, r)
			}
		}
	}
	return repos
}

// KernelArgs returns the image's kernel arguments, then the layers' in order.
func (p *Plan) KernelArgs() []string {
	args := slices.Clone(p.Image.KernelArgs)
	for _, l := range p.Layers {
		args = append(args, l.KernelArgs...)
	}
	return args
}

// PackageNames returns every package of every layer, sorted.
func (p *Plan) PackageNames() []string {
	var names []string
	for _, l := range p.Layers {
		names = append(names, l.Packages...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// LockDigest is Digest without the site's overrides. A lock pins packages by repo-relative
// location and sha256, so a site that moves a repository to a mirror does not make it stale.
func (p *Plan) LockDigest() string { return p.digest(nil) }
