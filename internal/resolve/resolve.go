package resolve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/rpmcmd"
	"github.com/labcluster/gpucluster/internal/sha256hex"
	"github.com/labcluster/gpucluster/internal/spec"
)

// Layer is one layer of an image, as resolve needs it: role selection is
// already applied.
type Layer struct {
	Name     string
	Digest   string
	Repos    []rpmcmd.Repo
	Modules  []string // name:stream
	Packages []string
}

// Request is an image to lock, layers in install order. Repos carry the
// baseurls to resolve against (site overrides applied); they are recorded
// in the lock.
type Request struct {
	Image           string
	SpecDigest      string
	ReleaseVer      string
	Arch            string
	SourceDateEpoch int64
	Layers          []Layer
	// Archives are the repos' archive templates by repo id (spec.Repo.Archive, variables filled
	// in): each locked package of such a repo records the template filled in for it.
	Archives map[string]string
}

// Lock resolves req with dnf in workDir (scratch space: an installroot, the
// generated dnf configuration and the downloads; it is emptied first) and
// returns the lock. See the package doc for how layers are split.
func Lock(ctx context.Context, req Request, workDir string, log logrus.FieldLogger) (*LockFile, error) {
	if log == nil {
		log = logrus.StandardLogger()
	}
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	workDir, err := filepath.Abs(workDir)
	if err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	if err := os.RemoveAll(workDir); err != nil {
		return nil, fmt.Errorf("clear work dir: %w", err)
	}
	r := &resolver{
		req: req, workDir: workDir, log: log,
		env: &rpmcmd.Env{
			Root:       filepath.Join(workDir, "root"),
			WorkDir:    filepath.Join(workDir, "dnf"),
			ReleaseVer: req.ReleaseVer,
			Arch:       req.Arch,
			Log:        log,
		},
		known: map[string]Package{},
	}
	return r.lock(ctx)
}

type resolver struct {
	req     Request
	workDir string
	log     logrus.FieldLogger
	env     *rpmcmd.Env
	known   map[string]Package // downloaded file's NEVRA -> locked package (repo and location: see locateAll)
}

func checkRequest(req Request) error {
	if req.Image == "" {
		return errors.New("lock: no image name")
	}
	if len(req.Layers) == 0 {
		return fmt.Errorf("lock %s: no layers", req.Image)
	}
	names := map[string]bool{}
	repos := map[string]rpmcmd.Repo{}
	for _, ly := range req.Layers {
		if ly.Name == "" || names[ly.Name] {
			return fmt.Errorf("lock %s: layer name %q missing or repeated", req.Image, ly.Name)
		}
		names[ly.Name] = true
		for _, rp := range ly.Repos {
			if prev, ok := repos[rp.ID]; ok && prev != rp {
				return fmt.Errorf("lock %s: layer %s: repo %q defined differently by an earlier layer", req.Image, ly.Name, rp.ID)
			}
			repos[rp.ID] = rp
		}
	}
	return nil
}

func (r *resolver) lock(ctx context.Context) (*LockFile, error) {
	l := &LockFile{
		Format:          LockFormat,
		Image:           r.req.Image,
		SpecDigest:      r.req.SpecDigest,
		SourceDateEpoch: r.req.SourceDateEpoch,
		ReleaseVer:      r.env.ReleaseVer,
		Arch:            r.env.Arch,
	}
	var prev map[string]Package // set_{i-1} by NEVRA
	for i, ly := range r.req.Layers {
		r.env.Repos = appendRepos(r.env.Repos, ly.Repos)
		r.env.Modules = ly.Modules
		if err := r.env.EnableModules(ctx); err != nil {
			return nil, fmt.Errorf("layer %s: %w", ly.Name, err)
		}
		set, err := r.resolveUpTo(ctx, i, prev)
		if err != nil {
			return nil, err
		}
		l.Layers = append(l.Layers, LockLayer{Name: ly.Name, Digest: ly.Digest, Packages: newPackages(set, prev)})
		r.log.WithFields(logrus.Fields{"layer": ly.Name, "packages": len(set) - len(prev)}).Info("locked layer")
		prev = set
	}
	if err := r.locateAll(ctx, l.Layers); err != nil {
		return nil, err
	}
	for _, rp := range r.env.Repos {
		l.Repos = append(l.Repos, LockRepo{ID: rp.ID, BaseURL: rp.BaseURL})
	}
	if err := l.validate(); err != nil {
		return nil, fmt.Errorf("lock %s: %w", r.req.Image, err)
	}
	return l, nil
}

func appendRepos(have, add []rpmcmd.Repo) []rpmcmd.Repo {
	for _, a := range add {
		dup := false
		for _, h := range have {
			dup = dup || h.ID == a.ID
		}
		if !dup {
			have = append(have, a)
		}
	}
	return have
}

// newPackages is set minus prev, sorted.
func newPackages(set, prev map[string]Package) []Package {
	out := []Package{}
	for n, p := range set {
		if _, ok := prev[n]; !ok {
			out = append(out, p)
		}
	}
	return sortedPackages(out)
}

// resolveUpTo resolves layers 0..i, pinned to prev, and returns the whole
// set by NEVRA.
func (r *resolver) resolveUpTo(ctx context.Context, i int, prev map[string]Package) (map[string]Package, error) {
	ly := r.req.Layers[i]
	// Earlier layers' names are not asked for again: their pinned NEVRAs
	// satisfy them, and "install b" next to "install b-2.1" would make dnf
	// (best=True) want the newest b from a repo this layer added.
	specs := dedupe(ly.Packages)
	if len(specs) == 0 {
		return copySet(prev), nil
	}
	for _, p := range sortedPackages(mapValues(prev)) {
		specs = append(specs, p.NEVRA())
	}
	dl := filepath.Join(r.workDir, "download", strconv.Itoa(i))
	args := append([]string{"install", "--downloadonly", "--downloaddir=" + dl}, specs...)
	if _, err := r.env.DNF(ctx, args...); err != nil {
		return nil, r.explain(i, err)
	}
	set, err := r.readDownloads(ctx, dl)
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", ly.Name, err)
	}
	for n := range prev {
		if _, ok := set[n]; !ok {
			return nil, fmt.Errorf("layer %s: resolving dropped %s, locked by an earlier layer", ly.Name, n)
		}
	}
	return set, nil
}

func dedupe(names []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

func copySet(m map[string]Package) map[string]Package {
	out := make(map[string]Package, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func mapValues(m map[string]Package) []Package {
	out := make([]Package, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	return out
}

// noMatchRe is dnf's summary of the install arguments nothing provides
// (space-separated; the per-argument "No match for argument" lines go to
// standard output).
var noMatchRe = regexp.MustCompile(`(?m)Unable to find a match: (.+)$`)

// explain turns dnf's failure into an error naming the layers that ask for
// a package the repositories do not have.
func (r *resolver) explain(i int, err error) error {
	var ce *rpmcmd.CmdError
	if !errors.As(err, &ce) {
		return fmt.Errorf("layer %s: %w", r.req.Layers[i].Name, err)
	}
	name := r.req.Layers[i].Name
	if ke := r.keyFailure(ce.Stderr); ke != nil {
		ke.Layer, ke.Err = name, err
		return ke
	}
	var missing []string
	for _, m := range noMatchRe.FindAllStringSubmatch(ce.Stderr, -1) {
		for _, pkg := range strings.Fields(m[1]) {
			item := strconv.Quote(pkg)
			if by := r.layerOf(i, pkg); by != name {
				item += " (listed by layer " + by + ")"
			}
			missing = append(missing, item)
		}
	}
	if len(missing) == 0 {
		return fmt.Errorf("layer %s: resolve: %w", name, err)
	}
	var ids []string
	for _, rp := range r.env.Repos {
		ids = append(ids, rp.ID)
	}
	return fmt.Errorf("layer %s: package %s not found in repos %s",
		name, strings.Join(missing, ", "), strings.Join(ids, ", "))
}

// KeyError is a lock that failed on a repository's signing key: dnf could not fetch the key
// from the repo's gpgkey URL, or a package's signature does not verify with it (the URL names
// the wrong key, or the package was signed by another). imgbuild adds where the key is named.
type KeyError struct {
	Layer   string // the layer being resolved
	Repo    string // the repo whose gpgkey dnf names
	URL     string // that gpgkey
	Package string // the package that failed the check, when dnf says
	Err     error
}

func (e *KeyError) Error() string {
	what := "its key could not be fetched from " + e.URL
	if e.Package != "" {
		what = "package " + e.Package + " is not signed by the key at " + e.URL + " (a wrong key URL, or a package signed by another key)"
	}
	return fmt.Sprintf("repo %q: %s; refused (layer %s): %v", e.Repo, what, e.Layer, e.Err)
}

func (e *KeyError) Unwrap() error { return e.Err }

// failingPackageRe is dnf 4's report of a package whose signature does not verify.
var failingPackageRe = regexp.MustCompile(`Failing package is: (\S+)`)

// keyFailure recognises dnf's signature failures: the output names a repo's gpgkey URL in a
// failed download of it ("Curl error ... for <url>", "Status code: 404 for <url>") or next to
// "GPG check FAILED". The first repo in layer order with that URL is blamed: repos sharing a key
// share the fix.
func (r *resolver) keyFailure(stderr string) *KeyError {
	gpgFailed := strings.Contains(stderr, "GPG check FAILED")
	lines := strings.Split(stderr, "\n")
	for _, rp := range r.env.Repos {
		if rp.GPGKey == "" || !strings.Contains(stderr, rp.GPGKey) {
			continue
		}
		fetchFailed := slices.ContainsFunc(lines, func(l string) bool {
			return strings.Contains(l, rp.GPGKey) && (strings.Contains(l, "Curl error") || strings.Contains(l, "Status code:"))
		})
		if !gpgFailed && !fetchFailed {
			continue
		}
		ke := &KeyError{Repo: rp.ID, URL: rp.GPGKey}
		if m := failingPackageRe.FindStringSubmatch(stderr); m != nil && !fetchFailed {
			ke.Package = m[1]
		}
		return ke
	}
	return nil
}

// layerOf is the first layer up to i that lists pkg.
func (r *resolver) layerOf(i int, pkg string) string {
	for _, ly := range r.req.Layers[:i+1] {
		for _, p := range ly.Packages {
			if p == pkg {
				return ly.Name
			}
		}
	}
	return r.req.Layers[i].Name
}

// readDownloads identifies each downloaded RPM: NEVRA from its header and
// sha256 of its bytes, hashed once per NEVRA over all layers. Its repo and
// location come later, for all layers at once (locateAll).
func (r *resolver) readDownloads(ctx context.Context, dir string) (map[string]Package, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.rpm"))
	if err != nil {
		return nil, fmt.Errorf("list downloads: %w", err)
	}
	sort.Strings(files)
	hs, err := rpmcmd.ReadHeaders(ctx, files)
	if err != nil {
		return nil, err
	}
	set := map[string]Package{}
	for k, h := range hs {
		if p, ok := r.known[h.NEVRA()]; ok {
			set[h.NEVRA()] = p
			continue
		}
		sum, err := sha256hex.File(files[k])
		if err != nil {
			return nil, err
		}
		p := Package{Name: h.Name, Epoch: h.Epoch, Version: h.Version, Release: h.Release, Arch: h.Arch, SHA256: sum}
		set[h.NEVRA()], r.known[h.NEVRA()] = p, p
	}
	return set, nil
}

// locateAll fills in every locked package's repo and location with one
// repoquery after the last layer, rather than one per layer: each dnf run
// loads the repositories' metadata first, which for Rocky, EPEL and CUDA
// takes seconds.
func (r *resolver) locateAll(ctx context.Context, layers []LockLayer) error {
	nevras := make([]string, 0, len(r.known))
	for n := range r.known {
		nevras = append(nevras, n)
	}
	sort.Strings(nevras)
	if err := r.locate(ctx, nevras); err != nil {
		return err
	}
	for _, l := range layers {
		for k, p := range l.Packages {
			l.Packages[k] = r.known[p.NEVRA()]
		}
	}
	return nil
}

// locate fills repo and location in r.known for the given NEVRAs with one
// repoquery. When two repos carry the same NEVRA, the first repo in layer
// order wins; the locked sha256 still decides at fetch time. Modular
// filtering is off for the query (module_hotfixes on every repo): it runs
// after the last layer, and a stream that a later layer enabled without
// installing anything would otherwise hide a package an earlier layer locked.
// The query names exact NEVRAs that dnf already chose, so filtering has
// nothing left to decide.
func (r *resolver) locate(ctx context.Context, nevras []string) error {
	if len(nevras) == 0 {
		return nil
	}
	qf := "%{name}\t%{epoch}\t%{version}\t%{release}\t%{arch}\t%{repoid}\t%{location}\t%{sourcerpm}"
	args := []string{"repoquery", "--quiet", "--qf", qf}
	for _, rp := range r.env.Repos {
		args = append(args, "--setopt="+rp.ID+".module_hotfixes=true")
	}
	args = append(append(args, "--"), nevras...)
	out, err := r.env.DNF(ctx, args...)
	if err != nil {
		return fmt.Errorf("locate packages: %w", err)
	}
	found := map[string][3]string{}
	rank := r.repoRank()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 8 {
			continue
		}
		h, err := headerOf(f[:5])
		if err != nil {
			return fmt.Errorf("locate packages: %w", err)
		}
		n := h.NEVRA()
		if prev, ok := found[n]; ok && rank[prev[0]] <= rank[f[5]] {
			continue
		}
		found[n] = [3]string{f[5], f[6], f[7]}
	}
	for _, n := range nevras {
		loc, ok := found[n]
		if !ok {
			return fmt.Errorf("locate %s: dnf downloaded it but repoquery does not find it", n)
		}
		p := r.known[n]
		p.Repo, p.Location = loc[0], loc[1]
		archive, err := archiveURL(r.req.Archives[p.Repo], p, loc[2])
		if err != nil {
			return fmt.Errorf("locate %s: %w", n, err)
		}
		p.Archive = archive
		r.known[n] = p
	}
	return nil
}

// archiveURL fills the repo's archive template (none: "") for package p, built from the source
// package sourceRPM (name-version-release.src.rpm, as rpm's SOURCERPM tag has it).
func archiveURL(template string, p Package, sourceRPM string) (string, error) {
	if template == "" {
		return "", nil
	}
	values := map[string]string{"location": p.Location, "file": path.Base(p.Location), "arch": p.Arch}
	if name, version, release, ok := splitSourceRPM(sourceRPM); ok {
		values["source_name"], values["source_version"], values["source_release"] = name, version, release
	}
	return spec.FillArchive(template, values)
}

// splitSourceRPM splits "slurm-22.05.9-1.el9.src.rpm" into slurm, 22.05.9, 1.el9.
func splitSourceRPM(s string) (name, version, release string, ok bool) {
	nvr, ok := strings.CutSuffix(s, ".src.rpm")
	if !ok {
		nvr, ok = strings.CutSuffix(s, ".nosrc.rpm")
	}
	r := strings.LastIndexByte(nvr, '-')
	if !ok || r <= 0 {
		return "", "", "", false
	}
	v := strings.LastIndexByte(nvr[:r], '-')
	if v <= 0 {
		return "", "", "", false
	}
	return nvr[:v], nvr[v+1 : r], nvr[r+1:], true
}

func (r *resolver) repoRank() map[string]int {
	rank := map[string]int{}
	for i, rp := range r.env.Repos {
		rank[rp.ID] = i
	}
	return rank
}

func headerOf(f []string) (rpmcmd.Header, error) {
	epoch := 0
	if f[1] != "" && f[1] != "(none)" {
		e, err := strconv.Atoi(f[1])
		if err != nil {
			return rpmcmd.Header{}, fmt.Errorf("epoch %q: %w", f[1], err)
		}
		epoch = e
	}
	return rpmcmd.Header{Name: f[0], Epoch: epoch, Version: f[2], Release: f[3], Arch: f[4]}, nil
}
