package testrepo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// upstreamRepos says which upstream repository carries each package the layers name (and the
// stand-ins need), by the shipped layers' repo ids: a test that serves the layers' real
// repositories puts each stand-in where Rocky 9, EPEL 9, NVIDIA and OpenHPC 3 have it, so that
// dnf must find it through the right repo, enabled by the right layer.
var upstreamRepos = map[string][]string{
	"baseos": {"rocky-release", "setup", "filesystem", "bash", "coreutils", "systemd", "kernel", "kernel-core",
		"kernel-modules", "kernel-modules-core", "dracut", "dracut-network", "NetworkManager", "openssh-server",
		"openssh-clients", "sudo", "rpm", "dnf", "passwd", "shadow-utils", "iproute", "util-linux", "procps-ng",
		"kmod", "curl", "less", "vim-minimal", "tar", "rsync", "chrony", "nfs-utils", "xfsprogs", "make",
		"firewalld", "selinux-policy", "selinux-policy-targeted", "policycoreutils", "bzip2", "unzip", "gzip",
		"which", "findutils", "hostname", "e2fsprogs", "nftables", "iptables-nft", "libselinux-utils", "file", "xz",
		"python3-systemd", "openssl", "tpm2-tools"},
	"appstream": {"dracut-live", "munge", "mariadb-server", "kernel-devel", "kernel-headers", "openmpi",
		"openmpi-devel", "mpich", "mpich-devel", "pmix", "gcc", "gcc-c++", "gcc-gfortran", "openssl-devel",
		"patch", "git", "perl", "python3", "python3-pip", "tcl", "cmake", "rdma-core-devel", "postfix", "grafana"},
	"crb":     {"munge-devel", "libibverbs-devel"},
	"epel":    {"golang-github-prometheus", "golang-github-prometheus-node-exporter", "slurm", "slurm-slurmctld", "slurm-slurmd", "slurm-slurmdbd", "dkms", "apptainer", "pdsh", "pdsh-rcmd-ssh", "fail2ban", "Lmod"},
	"openhpc": {},
	// NVIDIA's rhel9 repository: see the prefixes in UpstreamRepo.
}

// UpstreamRepo returns the id of the repository that carries package name upstream.
func UpstreamRepo(name string) (string, error) {
	switch {
	case strings.HasSuffix(name, "-ohpc"):
		return "openhpc", nil
	case strings.HasPrefix(name, "cuda-"), strings.HasPrefix(name, "nvidia-"), strings.HasPrefix(name, "kmod-nvidia"):
		return "cuda-rhel9-x86_64", nil
	}
	for id, names := range upstreamRepos {
		if slices.Contains(names, name) {
			return id, nil
		}
	}
	return "", fmt.Errorf("testrepo: which upstream repository carries %q? add it to upstreamRepos (internal/testkit/testrepo/upstream.go)", name)
}

// Upstream is a stand-in for each real repository a tree's images name: every package where
// UpstreamRepo says it lives, signed as its repository signs.
type Upstream struct {
	Repos map[string]string // repo id -> repository directory (dir/<id>)
	Names []string          // the packages the images name, sorted
}

// BuildUpstream builds, under dir, one repository per repo id the images (paths of image TOMLs,
// layers in layersDir) use, holding the stand-ins of the packages that repository carries
// upstream, signed by sign (repo id, RPM files) before the metadata is written, with the module
// streams their layers enable.
func BuildUpstream(ctx context.Context, dir, layersDir string, images []string, sign func(repo string, rpms []string) error) (Upstream, error) {
	names, repoIDs, streams, err := planned(layersDir, images)
	if err != nil {
		return Upstream{}, err
	}
	mods, err := modules(streams)
	if err != nil {
		return Upstream{}, err
	}
	kernel, err := HostKernel()
	if err != nil {
		return Upstream{}, err
	}
	byRepo := map[string][]Package{}
	for _, p := range Standins(names, kernel) {
		id, err := UpstreamRepo(p.Name)
		if err != nil {
			return Upstream{}, err
		}
		if !slices.Contains(repoIDs, id) {
			return Upstream{}, fmt.Errorf("testrepo: %s lives in repo %s, which no layer of these images names", p.Name, id)
		}
		byRepo[id] = append(byRepo[id], p)
	}
	u := Upstream{Repos: map[string]string{}, Names: names}
	for _, id := range repoIDs {
		repo := filepath.Join(dir, id)
		if err := buildSigned(ctx, repo, byRepo[id], func(rpms []string) error { return sign(id, rpms) }); err != nil {
			return Upstream{}, fmt.Errorf("repo %s: %w", id, err)
		}
		if in := modulesIn(mods, byRepo[id]); len(in) > 0 {
			if err := AddModules(ctx, repo, in, byRepo[id]); err != nil {
				return Upstream{}, err
			}
		}
		u.Repos[id] = repo
	}
	return u, nil
}

// buildSigned builds pkgs into the repository dir, signs them, and only then writes the
// metadata (the signature changes each file's size and checksum).
func buildSigned(ctx context.Context, dir string, pkgs []Package, sign func([]string) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil { // a repository may be empty (CRB here)
		return err
	}
	if err := buildRPMs(ctx, dir, pkgs); err != nil {
		return err
	}
	rpms, err := RPMs(dir)
	if err != nil {
		return err
	}
	if err := sign(rpms); err != nil {
		return err
	}
	return Createrepo(ctx, dir)
}

// Resign signs the RPM file again with sign and rewrites the metadata of its repository dir,
// as a repository would after publishing a package signed by another key. The repository's
// module metadata is not kept: resign a package of a repository without modules.
func Resign(ctx context.Context, dir, rpm string, sign func([]string) error) error {
	if err := sign([]string{rpm}); err != nil {
		return err
	}
	return Createrepo(ctx, dir)
}

// modulesIn are the streams all of whose packages are in pkgs.
func modulesIn(mods []Module, pkgs []Package) []Module {
	var out []Module
	for _, m := range mods {
		in := len(m.Packages) > 0
		for _, name := range m.Packages {
			in = in && slices.ContainsFunc(pkgs, func(p Package) bool { return p.Name == name })
		}
		if in {
			out = append(out, m)
		}
	}
	return out
}
