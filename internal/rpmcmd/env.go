package rpmcmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sirupsen/logrus"
)

// DBPath is where the rpm database lives inside an image: Rocky 9 keeps it
// in /var/lib/rpm with the sqlite backend.
const DBPath = "/var/lib/rpm"

// Repo is one package repository as dnf sees it.
type Repo struct {
	ID       string
	Name     string
	BaseURL  string
	GPGKey   string // URL of the key, optional
	GPGCheck bool
}

// Env is dnf and rpm set up for one image root. WorkDir holds the generated
// configuration (dnf.conf, repo files, rpm macros); it must not be inside
// Root.
type Env struct {
	Root       string
	WorkDir    string
	ReleaseVer string // default "9"
	Arch       string // default "x86_64"
	Repos      []Repo
	Modules    []string // name:stream, enabled by EnableModules
	// SourceDateEpoch, when not zero, is exported as SOURCE_DATE_EPOCH so
	// that rpm records it as install time.
	SourceDateEpoch int64
	Log             logrus.FieldLogger
}

var repoIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`)

func (e *Env) releaseVer() string {
	if e.ReleaseVer == "" {
		return "9"
	}
	return e.ReleaseVer
}

func (e *Env) arch() string {
	if e.Arch == "" {
		return "x86_64"
	}
	return e.Arch
}

func (e *Env) log() logrus.FieldLogger {
	if e.Log == nil {
		l := logrus.New()
		l.SetOutput(discard{})
		return l
	}
	return e.Log
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// check refuses an Env that would make dnf act on the host or read a
// malformed repo file.
func (e *Env) check() error {
	if !filepath.IsAbs(e.Root) || filepath.Clean(e.Root) == "/" {
		return fmt.Errorf("image root %q: must be an absolute path other than /", e.Root)
	}
	if !filepath.IsAbs(e.WorkDir) {
		return fmt.Errorf("work dir %q: must be an absolute path", e.WorkDir)
	}
	if within(e.WorkDir, e.Root) {
		return fmt.Errorf("work dir %s is inside the image root %s", e.WorkDir, e.Root)
	}
	seen := map[string]bool{}
	for _, r := range e.Repos {
		if err := r.check(); err != nil {
			return err
		}
		if seen[r.ID] {
			return fmt.Errorf("repo %q: defined twice", r.ID)
		}
		seen[r.ID] = true
	}
	return nil
}

func (r Repo) check() error {
	if !repoIDRe.MatchString(r.ID) {
		return fmt.Errorf("repo id %q: only letters, digits and _.:- allowed", r.ID)
	}
	if r.BaseURL == "" {
		return fmt.Errorf("repo %q: no baseurl", r.ID)
	}
	for _, v := range []string{r.Name, r.BaseURL, r.GPGKey} {
		if strings.ContainsAny(v, "\n\r") {
			return fmt.Errorf("repo %q: line break in a value", r.ID)
		}
	}
	if r.GPGCheck && r.GPGKey == "" {
		return fmt.Errorf("repo %q: gpgcheck is on but no gpgkey is given", r.ID)
	}
	return nil
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func (e *Env) confPath() string   { return filepath.Join(e.WorkDir, "dnf.conf") }
func (e *Env) reposDir() string   { return filepath.Join(e.WorkDir, "repos.d") }
func (e *Env) varsDir() string    { return filepath.Join(e.WorkDir, "vars") }
func (e *Env) homeDir() string    { return filepath.Join(e.WorkDir, "home") }
func (e *Env) platformID() string { return "platform:el" + strings.SplitN(e.releaseVer(), ".", 2)[0] }

// setup writes the generated configuration. It rewrites everything on each
// call, so a changed Repos list never leaves a stale repo file behind.
func (e *Env) setup() error {
	if err := e.check(); err != nil {
		return err
	}
	for _, d := range []string{e.Root, e.varsDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	if err := writeMacros(e.homeDir()); err != nil {
		return err
	}
	if err := os.RemoveAll(e.reposDir()); err != nil {
		return fmt.Errorf("clear %s: %w", e.reposDir(), err)
	}
	if err := os.MkdirAll(e.reposDir(), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", e.reposDir(), err)
	}
	for _, r := range e.Repos {
		p := filepath.Join(e.reposDir(), r.ID+".repo")
		if err := os.WriteFile(p, []byte(r.file()), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return writeFile(e.confPath(), e.dnfConf())
}

// dnfConf is the main configuration. Every option that changes what gets
// resolved is spelled out rather than left to the host's defaults.
func (e *Env) dnfConf() string {
	return strings.Join([]string{
		"[main]",
		"best=True",                 // the newest candidate or an error, never a silent older one
		"strict=True",               // a missing package is an error
		"skip_if_unavailable=False", // an unreachable repo is an error, not a smaller lock
		"install_weak_deps=False",   // see the package doc
		"installonly_limit=0",       // never remove an installed kernel on our behalf
		"keepcache=True",            // packages downloaded once per lock run
		"gpgcheck=True",             // the default; each repo file overrides it
		"plugins=False",
		"protected_packages=",
		"module_platform_id=" + e.platformID(),
		// dnf prefixes these with the installroot anyway: name the standard
		// places so the image's cleanup finds them.
		"cachedir=/var/cache/dnf",
		"logdir=/var/log",
		"persistdir=/var/lib/dnf",
		"",
	}, "\n")
}

// file is the repo's .repo file. gpgcheck is per repo: --nogpgcheck would
// switch signature checks off for every repo of the image at once.
func (r Repo) file() string {
	name := r.Name
	if name == "" {
		name = r.ID
	}
	lines := []string{
		"[" + r.ID + "]",
		"name=" + name,
		"baseurl=" + r.BaseURL,
		"enabled=1",
		"gpgcheck=" + boolOpt(r.GPGCheck),
		"repo_gpgcheck=0",
	}
	if r.GPGKey != "" {
		lines = append(lines, "gpgkey="+r.GPGKey)
	}
	return strings.Join(lines, "\n") + "\n"
}

func boolOpt(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// writeMacros writes <home>/.rpmmacros, the only way to change %_dbpath for
// dnf (which runs librpm in-process) on a host whose rpm defaults to ~/.rpmdb.
func writeMacros(home string) error {
	if err := os.MkdirAll(home, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", home, err)
	}
	m := "%_dbpath " + DBPath + "\n%_db_backend sqlite\n"
	return writeFile(filepath.Join(home, ".rpmmacros"), m)
}

func writeFile(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// DNF runs dnf on the image root and returns its standard output. The error
// carries the tail of dnf's standard error.
func (e *Env) DNF(ctx context.Context, args ...string) ([]byte, error) {
	if err := e.setup(); err != nil {
		return nil, err
	}
	full := append([]string{
		"-c", e.confPath(),
		"--installroot=" + e.Root,
		"--releasever=" + e.releaseVer(),
		"--forcearch=" + e.arch(),
		"--setopt=reposdir=" + e.reposDir(),
		"--setopt=varsdir=" + e.varsDir(),
		"--noplugins",
		"--assumeyes",
	}, args...)
	return run(ctx, e.log(), "dnf", full, e.environ())
}

// RPM runs rpm on the image root (--root, the image's database) and returns
// its standard output.
func (e *Env) RPM(ctx context.Context, args ...string) ([]byte, error) {
	if err := e.setup(); err != nil {
		return nil, err
	}
	return run(ctx, e.log(), "rpm", append(rootArgs(e.Root), args...), e.environ())
}

func rootArgs(root string) []string {
	return []string{"--root=" + root, "--dbpath=" + DBPath}
}

func (e *Env) environ() []string { return environ(e.homeDir(), e.SourceDateEpoch) }

// EnableModules enables e.Modules (name:stream) in the image root. dnf keeps
// the module state inside the root (/etc/dnf/modules.d), so later DNF calls
// on the same root see it.
func (e *Env) EnableModules(ctx context.Context) error {
	if len(e.Modules) == 0 {
		return nil
	}
	for _, m := range e.Modules {
		if name, stream, ok := strings.Cut(m, ":"); !ok || name == "" || stream == "" {
			return fmt.Errorf("module %q: want name:stream", m)
		}
	}
	_, err := e.DNF(ctx, append([]string{"module", "enable"}, e.Modules...)...)
	if err != nil {
		return fmt.Errorf("enable modules %s: %w", strings.Join(e.Modules, " "), err)
	}
	return nil
}
