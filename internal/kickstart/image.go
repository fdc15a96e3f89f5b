package kickstart

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"text/template"

	"github.com/labcluster/gpucluster/internal/resolve"
	"github.com/labcluster/gpucluster/internal/spec"
)

// Extras are installed for the disk install though the image has no need of
// them: Node's %post sets the kernel arguments with grubby.
var Extras = []string{"grubby"}

type imageView struct {
	Image, Role, LockDigest string
	Epoch                   int64
	KernelArgs              string
	BaseURL                 string      // anaconda's installation source: the first repository
	Repos                   []spec.Repo // the others
	Modules                 []moduleView
	Groups                  []spec.Group
	Users                   []userView
	Enable, Disable         []string
	Layers                  []layerView
	Extras                  []string
}

type moduleView struct{ Name, Stream string }

type userView struct {
	Name, Home, Shell, Gecos string
	UID, GID                 int
}

type layerView struct {
	Name            string
	Packages        []string
	Files           []fileView
	Enable, Disable []string
	Run             []runView
}

type fileView struct {
	Path, Mode, Owner, Group string
	Base64                   []string // lines
}

type runView struct {
	Index                       int
	Description, Command, Delim string
}

// Image renders the image-level kickstart body of plan, with every package
// pinned to lock, from the templates (the kickstart/ directory's FS).
func Image(plan *spec.Plan, lock *resolve.LockFile, templates fs.FS) ([]byte, error) {
	if err := checkLock(plan, lock); err != nil {
		return nil, err
	}
	v, err := newImageView(plan, lock)
	if err != nil {
		return nil, fmt.Errorf("kickstart for image %s: %w", plan.Image.Name, err)
	}
	return render(templates, "image.ks.tmpl", v)
}

// checkLock wants the lock made for this plan, so that the disk install gets
// the packages the netboot image has, and its layers one to one with the plan's.
func checkLock(plan *spec.Plan, lock *resolve.LockFile) error {
	refs := make([]resolve.LayerRef, len(plan.Layers))
	for i, l := range plan.Layers {
		refs[i] = resolve.LayerRef{Name: l.Name, Digest: l.Digest}
	}
	return lock.CheckFresh("sha256:"+plan.LockDigest(), refs)
}

func newImageView(plan *spec.Plan, lock *resolve.LockFile) (*imageView, error) {
	v := &imageView{Image: plan.Image.Name, Role: plan.Image.Role, LockDigest: lock.Digest(), Epoch: lock.SourceDateEpoch}
	args, err := kernelArgs(plan)
	if err != nil {
		return nil, err
	}
	v.KernelArgs = strings.Join(args, " ")
	if err := v.addRepos(plan); err != nil {
		return nil, err
	}
	locked := map[string]bool{}
	for i, l := range plan.Layers {
		lv, err := layer(l, lock.Layers[i])
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", l.Name, err)
		}
		if err := v.addAccounts(l); err != nil {
			return nil, fmt.Errorf("layer %s: %w", l.Name, err)
		}
		v.Layers = append(v.Layers, lv)
		v.Enable = append(v.Enable, l.Services.Enable...)
		v.Disable = append(v.Disable, l.Services.Disable...)
		for _, m := range l.Modules.Enable {
			name, stream, _ := strings.Cut(m, ":") // spec checked name:stream
			v.Modules = append(v.Modules, moduleView{name, stream})
		}
		for _, p := range lock.Layers[i].Packages {
			locked[p.Name] = true
		}
	}
	for _, e := range Extras {
		if !locked[e] {
			v.Extras = append(v.Extras, e)
		}
	}
	return v, nil
}

// kernelArgs are the image's, then the layers', each checked where it was
// defined.
func kernelArgs(plan *spec.Plan) ([]string, error) {
	for i, a := range plan.Image.KernelArgs {
		if err := checkWord(a); err != nil {
			return nil, fmt.Errorf("kernel_args[%d]: %w", i, err)
		}
	}
	for _, l := range plan.Layers {
		for i, a := range l.KernelArgs {
			if err := checkWord(a); err != nil {
				return nil, fmt.Errorf("layer %s: kernel_args[%d]: %w", l.Name, i, err)
			}
		}
	}
	return plan.KernelArgs(), nil
}

// addRepos takes the plan's repos, site overrides applied: the first is
// anaconda's installation source (it needs one), the others extra repos.
func (v *imageView) addRepos(plan *spec.Plan) error {
	repos := plan.Repos()
	if len(repos) == 0 {
		return fmt.Errorf("no repository: anaconda needs an installation source")
	}
	for _, l := range plan.Layers {
		for i, r := range l.Repos {
			if err := checkWord(r.BaseURL); err != nil {
				return fmt.Errorf("layer %s: repos[%d].baseurl: %w", l.Name, i, err)
			}
		}
	}
	v.BaseURL, v.Repos = repos[0].BaseURL, repos[1:]
	return nil
}

func (v *imageView) addAccounts(l *spec.Layer) error {
	v.Groups = append(v.Groups, l.Groups...)
	for i, u := range l.Users {
		// A service account: never a login shell by default.
		uv := userView{Name: u.Name, UID: u.UID, GID: u.GID, Home: u.Home, Shell: u.Shell, Gecos: u.Comment}
		if uv.Shell == "" {
			uv.Shell = "/sbin/nologin"
		}
		for _, f := range [][2]string{{"home", u.Home}, {"shell", u.Shell}, {"comment", u.Comment}} {
			if err := checkArg(f[1]); err != nil {
				return fmt.Errorf("users[%d].%s: %w", i, f[0], err)
			}
		}
		v.Users = append(v.Users, uv)
	}
	return nil
}

// layer is what the %packages and the %post need of one layer.
func layer(l *spec.Layer, ll resolve.LockLayer) (layerView, error) {
	lv := layerView{Name: l.Name, Enable: l.Services.Enable, Disable: l.Services.Disable}
	for _, p := range ll.Packages {
		nvra := fmt.Sprintf("%s-%s-%s.%s", p.Name, p.Version, p.Release, p.Arch)
		if err := checkWord(nvra); err != nil || strings.HasPrefix(nvra, "%") {
			return lv, fmt.Errorf("locked package %q cannot be listed in %%packages", nvra)
		}
		lv.Packages = append(lv.Packages, nvra)
	}
	if err := checkUnits("enable", l.Services.Enable); err != nil {
		return lv, err
	}
	if err := checkUnits("disable", l.Services.Disable); err != nil {
		return lv, err
	}
	for i, f := range l.Files {
		fv, err := file(f)
		if err != nil {
			return lv, fmt.Errorf("files[%d] (%s): %w", i, f.Path, err)
		}
		lv.Files = append(lv.Files, fv)
	}
	for i, c := range l.Run {
		rv, err := run(i, c)
		if err != nil {
			return lv, fmt.Errorf("run[%d].command: %w", i, err)
		}
		lv.Run = append(lv.Run, rv)
	}
	return lv, nil
}

func file(f spec.File) (fileView, error) {
	for _, s := range []string{f.Path, f.Owner, f.Group} {
		if err := checkText(s); err != nil {
			return fileView{}, err
		}
	}
	data, err := f.Data()
	if err != nil {
		return fileView{}, fmt.Errorf("read source: %w", err)
	}
	return fileView{Path: f.Path, Mode: unixMode(f.Mode), Owner: f.Owner, Group: f.Group,
		Base64: wrap(base64.StdEncoding.EncodeToString(data), 76)}, nil
}

// unixMode is chmod's octal form of m, special bits included.
func unixMode(m fs.FileMode) string {
	n := uint32(m.Perm())
	for mode, bit := range map[fs.FileMode]uint32{fs.ModeSetuid: 0o4000, fs.ModeSetgid: 0o2000, fs.ModeSticky: 0o1000} {
		if m&mode != 0 {
			n |= bit
		}
	}
	return fmt.Sprintf("%04o", n)
}

func wrap(s string, n int) []string {
	var lines []string
	for len(s) > n {
		lines = append(lines, s[:n])
		s = s[n:]
	}
	if s != "" {
		lines = append(lines, s)
	}
	return lines
}

// run keeps a command readable in a quoted here-document. Kickstart reads a
// line starting with % as a section header (or %include) even inside %post,
// so such a command cannot be written.
func run(i int, c spec.Command) (runView, error) {
	cmd := strings.TrimRight(c.Command, "\n")
	lines := strings.Split(cmd, "\n")
	for n, line := range lines {
		if strings.HasPrefix(strings.TrimLeft(line, " \t"), "%") {
			return runView{}, fmt.Errorf("line %d starts with %%, which kickstart reads as a section header", n+1)
		}
		if strings.ContainsRune(line, 0) {
			return runView{}, fmt.Errorf("line %d has a NUL byte", n+1)
		}
	}
	delim := "KS_RUN"
	for k := 1; slices.Contains(lines, delim); k++ {
		delim = fmt.Sprintf("KS_RUN_%d", k)
	}
	desc := strings.Join(strings.Fields(c.Description), " ") // one comment line
	return runView{Index: i, Description: desc, Command: cmd, Delim: delim}, nil
}

// checkUnits refuses what the services command cannot list unquoted:
// systemd's escapes (a backslash) among them.
func checkUnits(kind string, units []string) error {
	for i, u := range units {
		if err := checkItem(u); err != nil {
			return fmt.Errorf("services.%s[%d]: %w", kind, i, err)
		}
	}
	return nil
}

var funcs = template.FuncMap{"ks": ksQuote, "sh": shQuote, "ksList": ksList, "shList": shList}

func render(templates fs.FS, name string, data any) ([]byte, error) {
	t, err := template.New(name).Funcs(funcs).Option("missingkey=error").ParseFS(templates, name)
	if err != nil {
		return nil, fmt.Errorf("kickstart template: %w", err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("kickstart template %s: %w", name, err)
	}
	return b.Bytes(), nil
}
