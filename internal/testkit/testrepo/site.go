package testrepo

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/labcluster/gpucluster/internal/rpmcmd"
	"github.com/labcluster/gpucluster/internal/spec"
)

// moduleStreams are the packages each dnf module stream the project's layers enable holds
// upstream: the stand-in repository offers the same streams.
var moduleStreams = map[string][]string{
	"nvidia-driver:open-dkms": {"kmod-nvidia-open-dkms"},
	"nvidia-driver:580-dkms":  {"kmod-nvidia-latest-dkms"},
}

// Site is a stand-in for every repository a tree's images name: one local repository holding a
// stand-in for each package they install, and a site file that points each repository id there.
type Site struct {
	Repo     string   // the repository directory
	Path     string   // the site file (imgbuild --site): every id in RepoIDs at file://Repo
	Names    []string // the packages the images name, sorted
	RepoIDs  []string // the repositories they use, sorted
	Streams  []string // the module streams their layers enable, sorted
	Packages int      // stand-ins built: the named packages and what they need
}

// Large gives one package of the stand-in site a realistic payload (Payload) under Dir, built
// once into CacheDir (PayloadRPM) and reused by later sites.
type Large struct {
	Package  string // e.g. cuda-toolkit-12-6, which the nvidia-cuda layer installs
	Version  string // the package's version, e.g. 12.6.3
	Dir      string // where the payload goes in the image, e.g. /usr/local/cuda-12.6
	Payload  Payload
	CacheDir string
}

// CUDA is the CUDA toolkit's stand-in at the size given: cuda-toolkit-12-6, its files under
// /usr/local/cuda-12.6 as NVIDIA's packages install them.
func CUDA(bytes int64, cacheDir string) *Large {
	return &Large{Package: "cuda-toolkit-12-6", Version: "12.6.3", Dir: "/usr/local/cuda-12.6",
		Payload: Payload{Bytes: bytes, Seed: 1}, CacheDir: cacheDir}
}

// StandInTree copies src's layers/ and images/ into dir (so tests may edit them) and makes the
// stand-in site there for the named images (images/<name>.toml).
func StandInTree(ctx context.Context, src, dir string, images ...string) (Site, error) {
	return StandInTreeLarge(ctx, src, dir, nil, images...)
}

// StandInTreeLarge is StandInTree with one package of realistic size (nil: none).
func StandInTreeLarge(ctx context.Context, src, dir string, large *Large, images ...string) (Site, error) {
	for _, sub := range []string{"layers", "images"} {
		if out, err := exec.CommandContext(ctx, "cp", "-a", filepath.Join(src, sub), filepath.Join(dir, sub)).CombinedOutput(); err != nil {
			return Site{}, fmt.Errorf("copy %s: %v: %s", sub, err, out)
		}
	}
	paths := make([]string, len(images))
	for i, name := range images {
		paths[i] = filepath.Join(dir, "images", name+".toml")
	}
	return standInSite(ctx, dir, filepath.Join(dir, "layers"), large, paths...)
}

// standInSite builds, under dir, the repository and site file for the images (paths of image
// TOMLs) of a tree whose layers are in layersDir: the real dnf and rpm then lock and build
// them with no network.
func standInSite(ctx context.Context, dir, layersDir string, large *Large, images ...string) (Site, error) {
	names, repoIDs, streams, err := planned(layersDir, images)
	if err != nil {
		return Site{}, err
	}
	mods, err := modules(streams)
	if err != nil {
		return Site{}, err
	}
	kernel, err := HostKernel()
	if err != nil {
		return Site{}, err
	}
	pkgs := Standins(names, kernel)
	s := Site{Repo: filepath.Join(dir, "repo"), Path: filepath.Join(dir, "site.toml"), Names: names, RepoIDs: repoIDs, Streams: streams, Packages: len(pkgs)}
	if large != nil {
		if pkgs, err = addLarge(ctx, s.Repo, pkgs, *large); err != nil {
			return Site{}, err
		}
	}
	if err := Build(ctx, s.Repo, pkgs); err != nil {
		return Site{}, err
	}
	if err := AddModules(ctx, s.Repo, mods, pkgs); err != nil {
		return Site{}, err
	}
	var site strings.Builder
	for _, r := range s.Repos() {
		fmt.Fprintf(&site, "[repos.%s]\nbaseurl = \"%s\"\ngpgcheck = false\n\n", r.ID, r.BaseURL)
	}
	return s, os.WriteFile(s.Path, []byte(site.String()), 0o644)
}

// addLarge puts the large package, from its cache, into repo in place of its small stand-in, and
// returns the packages left to build.
func addLarge(ctx context.Context, repo string, pkgs []Package, l Large) ([]Package, error) {
	i := slices.IndexFunc(pkgs, func(p Package) bool { return p.Name == l.Package })
	if i < 0 {
		return nil, fmt.Errorf("no image installs %s, the package given a large payload", l.Package)
	}
	p := Package{Name: l.Package, Version: l.Version, Arch: "x86_64", Requires: []string{"filesystem"},
		Payload: &l.Payload, PayloadDir: l.Dir}
	rpm, err := PayloadRPM(ctx, l.CacheDir, p)
	if err != nil {
		return nil, fmt.Errorf("%s with a %d-byte payload: %w", l.Package, l.Payload.Bytes, err)
	}
	dst := filepath.Join(repo, "Packages", strings.ToLower(l.Package[:1]), p.FileName())
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return nil, err
	}
	// A link where it can be, not a copy: the file is gigabytes and nothing writes to it.
	if err := os.Link(rpm, dst); err != nil {
		if err := copyFile(rpm, dst); err != nil {
			return nil, err
		}
	}
	return slices.Delete(pkgs, i, i+1), nil
}

// planned returns every package name, repository id and module stream the images use.
func planned(layersDir string, images []string) (names, repos, streams []string, err error) {
	for _, path := range images {
		im, err := spec.LoadImage(path)
		if err != nil {
			return nil, nil, nil, err
		}
		p, err := spec.Resolve(im, layersDir, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		names = append(names, p.PackageNames()...)
		for _, r := range p.Repos() {
			repos = append(repos, r.ID)
		}
		for _, ly := range p.Layers {
			streams = append(streams, ly.Modules.Enable...)
		}
	}
	slices.Sort(names)
	slices.Sort(repos)
	slices.Sort(streams)
	return slices.Compact(names), slices.Compact(repos), slices.Compact(streams), nil
}

func modules(streams []string) ([]Module, error) {
	var mods []Module
	for _, s := range streams {
		pkgs, ok := moduleStreams[s]
		if !ok {
			return nil, fmt.Errorf("a layer enables module stream %s, which the stand-in repository does not know: add its packages to testrepo's moduleStreams", s)
		}
		name, stream, _ := strings.Cut(s, ":")
		mods = append(mods, Module{Name: name, Stream: stream, Packages: pkgs})
	}
	return mods, nil
}

// Repos are the site's repositories as dnf takes them: every id the images name, at the one
// stand-in repository. The site file says the same.
func (s Site) Repos() []rpmcmd.Repo {
	var repos []rpmcmd.Repo
	for _, id := range s.RepoIDs {
		repos = append(repos, rpmcmd.Repo{ID: id, BaseURL: "file://" + s.Repo})
	}
	return repos
}
