package kickstart

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"text/template"
)

// Extras are installed for the disk install though the image has no need of
// them: Node's %post sets the kernel arguments with grubby.
var Extras = []string{"grubby"}

// Image is the kickstart's view of one image: its plan and its lock in the
// terms a disk install needs. imgbuild fills it, so that bootd, which only
// completes kickstarts per node (Node), links none of the image builder.
type Image struct {
	Name, Role      string
	LockDigest      string // the lock's own digest, written as a comment
	SourceDateEpoch int64
	KernelArgs      []string // the image's own; then each layer's
	// Repos are the layers' repositories, each id once, in layer order, site
	// overrides applied: the first is anaconda's installation source.
	Repos  []Repo
	Layers []Layer // in build order
}

// Repo is a dnf repository.
type Repo struct{ ID, BaseURL string }

// Layer is one layer: its locked packages and what it writes and runs.
type Layer struct {
	Name            string
	Packages        []Package // as locked
	KernelArgs      []string
	Modules         []string // name:stream, enabled before the packages install
	Groups          []Group
	Users           []User
	Files           []File
	Enable, Disable []string // systemd units
	Run             []Command
}

// Package is a locked package.
type Package struct{ Name, Version, Release, Arch string }

// Group is a group with a fixed gid.
type Group struct {
	Name string
	GID  int
}

// User is a service account with fixed ids.
type User struct {
	Name                 string
	UID, GID             int
	Home, Shell, Comment string
}

// File is a file a layer writes; Data returns its bytes.
type File struct {
	Path, Owner, Group string
	Mode               fs.FileMode
	Data               func() ([]byte, error)
}

// Command is a shell command a layer runs in the image.
type Command struct{ Command, Description string }

type imageView struct {
	Image, Role, LockDigest string
	Epoch                   int64
	KernelArgs              string
	BaseURL                 string // anaconda's installation source: the first repository
	Repos                   []Repo // the others
	Modules                 []moduleView
	Groups                  []Group
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

// Render renders img's kickstart body, every package pinned as locked, from
// the templates (the kickstart/ directory's FS).
func Render(img Image, templates fs.FS) ([]byte, error) {
	v, err := newImageView(img)
	if err != nil {
		return nil, fmt.Errorf("kickstart for image %s: %w", img.Name, err)
	}
	return render(templates, "image.ks.tmpl", v)
}

func newImageView(img Image) (*imageView, error) {
	v := &imageView{Image: img.Name, Role: img.Role, LockDigest: img.LockDigest, Epoch: img.SourceDateEpoch}
	args, err := kernelArgs(img)
	if err != nil {
		return nil, err
	}
	v.KernelArgs = strings.Join(args, " ")
	if err := v.addRepos(img.Repos); err != nil {
		return nil, err
	}
	locked := map[string]bool{}
	for _, l := range img.Layers {
		if err := v.addLayer(l); err != nil {
			return nil, fmt.Errorf("layer %s: %w", l.Name, err)
		}
		for _, p := range l.Packages {
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
func kernelArgs(img Image) ([]string, error) {
	if err := checkArgs(img.KernelArgs); err != nil {
		return nil, err
	}
	args := slices.Clone(img.KernelArgs)
	for _, l := range img.Layers {
		if err := checkArgs(l.KernelArgs); err != nil {
			return nil, fmt.Errorf("layer %s: %w", l.Name, err)
		}
		args = append(args, l.KernelArgs...)
	}
	return args, nil
}

func checkArgs(args []string) error {
	for i, a := range args {
		if err := checkWord(a); err != nil {
			return fmt.Errorf("kernel_args[%d]: %w", i, err)
		}
	}
	return nil
}

// addRepos takes the first repository as anaconda's installation source (it
// needs one) and the others as extra repos.
func (v *imageView) addRepos(repos []Repo) error {
	if len(repos) == 0 {
		return fmt.Errorf("no repository: anaconda needs an installation source")
	}
	for _, r := range repos {
		if err := checkWord(r.BaseURL); err != nil {
			return fmt.Errorf("repo %s: baseurl: %w", r.ID, err)
		}
		if err := checkItem(r.ID); err != nil {
			return fmt.Errorf("repo id: %w", err)
		}
	}
	v.BaseURL, v.Repos = repos[0].BaseURL, repos[1:]
	return nil
}

// addLayer adds what the %packages and the %post need of one layer, and its
// accounts, units and module streams to the image's commands.
func (v *imageView) addLayer(l Layer) error {
	lv, err := layer(l)
	if err != nil {
		return err
	}
	if err := v.addAccounts(l); err != nil {
		return err
	}
	for _, m := range l.Modules {
		name, stream, ok := strings.Cut(m, ":")
		if !ok || checkItem(name) != nil || checkItem(stream) != nil {
			return fmt.Errorf("module %q is not name:stream", m)
		}
		v.Modules = append(v.Modules, moduleView{name, stream})
	}
	v.Layers = append(v.Layers, lv)
	v.Enable = append(v.Enable, l.Enable...)
	v.Disable = append(v.Disable, l.Disable...)
	return nil
}

func (v *imageView) addAccounts(l Layer) error {
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
func layer(l Layer) (layerView, error) {
	lv := layerView{Name: l.Name, Enable: l.Enable, Disable: l.Disable}
	for _, p := range l.Packages {
		nvra := fmt.Sprintf("%s-%s-%s.%s", p.Name, p.Version, p.Release, p.Arch)
		if err := checkWord(nvra); err != nil || strings.HasPrefix(nvra, "%") {
			return lv, fmt.Errorf("locked package %q cannot be listed in %%packages", nvra)
		}
		lv.Packages = append(lv.Packages, nvra)
	}
	if err := checkUnits("enable", l.Enable); err != nil {
		return lv, err
	}
	if err := checkUnits("disable", l.Disable); err != nil {
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

func file(f File) (fileView, error) {
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
func run(i int, c Command) (runView, error) {
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
