package imgbuild

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/labcluster/gpucluster/internal/resolve"
	"github.com/labcluster/gpucluster/internal/rpmcmd"
	"github.com/labcluster/gpucluster/internal/spec"
)

// Lock resolves the image at imagePath with the real dnf against its repositories (site
// overrides applied) and writes the lock beside it. It returns the lock's path.
func Lock(ctx context.Context, imagePath string, o Options) (string, *resolve.LockFile, error) {
	plan, err := loadPlan(imagePath, o)
	if err != nil {
		return "", nil, err
	}
	epoch, err := sourceDateEpoch(imagePath)
	if err != nil {
		return "", nil, err
	}
	req := resolve.Request{Image: plan.Image.Name, SpecDigest: lockDigest(plan), ReleaseVer: plan.Image.ReleaseVer,
		Arch: plan.Image.Arch, SourceDateEpoch: epoch, Layers: lockLayers(plan), Archives: archives(plan)}
	// Scratch of its own: locks take no cache lock, and two locks of one image at once (two
	// checkouts sharing a cache) must neither clear nor mix each other's installroots. A build
	// removes only scratch a day old (leftovers.go).
	if err := os.MkdirAll(o.CacheDir, 0o755); err != nil {
		return "", nil, err
	}
	scratch, err := os.MkdirTemp(o.CacheDir, lockPrefix+plan.Image.Name+"-")
	if err != nil {
		return "", nil, err
	}
	defer os.RemoveAll(scratch)
	lock, err := resolve.Lock(ctx, req, filepath.Join(scratch, "work"), o.Log)
	var ke *resolve.KeyError
	if errors.As(err, &ke) {
		return "", nil, fmt.Errorf("%s: %w", plan.RepoKeyWhere(ke.Repo), err)
	}
	if err != nil {
		return "", nil, err
	}
	path := LockPath(imagePath)
	return path, lock, lock.Write(path)
}

func lockLayers(p *spec.Plan) []resolve.Layer {
	out := make([]resolve.Layer, len(p.Layers))
	for i, l := range p.Layers {
		out[i] = resolve.Layer{Name: l.Name, Digest: l.Digest, Repos: rpmRepos(l.Repos), Modules: l.Modules.Enable, Packages: l.Packages}
	}
	return out
}

// archives are the plan's archive templates by repo id.
func archives(p *spec.Plan) map[string]string {
	out := map[string]string{}
	for _, r := range p.Repos() {
		if r.Archive != "" {
			out[r.ID] = r.Archive
		}
	}
	return out
}

func rpmRepos(repos []spec.Repo) []rpmcmd.Repo {
	out := make([]rpmcmd.Repo, len(repos))
	for i, r := range repos {
		out[i] = rpmcmd.Repo{ID: r.ID, Name: r.Name, BaseURL: r.BaseURL, GPGKey: r.GPGKey, GPGCheck: r.GPGCheck}
	}
	return out
}
