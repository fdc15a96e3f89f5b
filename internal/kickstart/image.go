package kickstart

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
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

// File is a file a layer writes; Open returns a reader of its bytes, which Write streams into the
// kickstart (base64, a line at a time) without holding them whole.
type File struct {
	Path, Owner, Group string
	Mode               fs.FileMode
	Open               func() (io.ReadCloser, error)
}

// Command is a shell command a layer runs in the image.
type Command struct{ Command, Description string }

type imageView struct {
	files                   []File // in the order of their markers
	marker                  string // this rendering's dataMarker prefix
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
	Data                     string // a marker where Write streams the content, base64 lines (dataMarker)
}

type runView struct {
	Index                       int
	Description, Command, Delim string
}

// Write writes img's kickstart body, every package pinned as locked, from the templates (the
// kickstart/ directory's FS) to w. Everything but the files' contents is rendered and checked
// first; the contents then stream from their sources, so a large file costs a few buffers, not
// its size. A source that fails to read fails Write with part of the body written.
func Write(w io.Writer, img Image, templates fs.FS) error {
	v, err := newImageView(img)
	if err != nil {
		return fmt.Errorf("kickstart for image %s: %w", img.Name, err)
	}
	text, err := render(templates, "image.ks.tmpl", v)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	for i, f := range v.files {
		m := []byte(dataMarker(v.marker, i))
		at := bytes.Index(text, m)
		if at < 0 {
			return fmt.Errorf("kickstart template image.ks.tmpl: the content of %s has no place", f.Path)
		}
		if _, err := bw.Write(text[:at]); err != nil {
			return err
		}
		if err := writeBase64(bw, f); err != nil {
			return fmt.Errorf("kickstart for image %s: %s: read source: %w", img.Name, f.Path, err)
		}
		text = text[at+len(m):]
	}
	if _, err := bw.Write(text); err != nil {
		return err
	}
	return bw.Flush()
}

// Render is Write into memory: for small images and tests.
func Render(img Image, templates fs.FS) ([]byte, error) {
	var b bytes.Buffer
	err := Write(&b, img, templates)
	return b.Bytes(), err
}

// dataMarker marks where file i's content goes in the rendered text. prefix holds random bytes
// and a NUL, which nothing a layer defines can carry (file paths and commands refuse control
// characters), so no text of the image passes for a marker.
func dataMarker(prefix string, i int) string { return fmt.Sprintf("%s%d\x00", prefix, i) }

func newMarker() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "\x00kickstart-data-" + hex.EncodeToString(b) + "-", nil
}

// writeBase64 streams f's content as base64 in lines of 76 characters, each ending in a newline.
func writeBase64(w io.Writer, f File) error {
	in, err := f.Open()
	if err != nil {
		return err
	}
	defer in.Close()
	lw := &lineWriter{w: w, width: 76}
	enc := base64.NewEncoder(base64.StdEncoding, lw)
	if _, err := io.Copy(enc, in); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	return lw.end()
}

// lineWriter breaks what it writes into lines of width bytes.
type lineWriter struct {
	w          io.Writer
	width, col int
}

func (l *lineWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), l.width-l.col)
		if _, err := l.w.Write(p[:k]); err != nil {
			return n, err
		}
		n, p, l.col = n+k, p[k:], l.col+k
		if l.col == l.width {
			if _, err := l.w.Write([]byte{'\n'}); err != nil {
				return n, err
			}
			l.col = 0
		}
	}
	return n, nil
}

// end closes the last line, if it has anything.
func (l *lineWriter) end() error {
	if l.col == 0 {
		return nil
	}
	_, err := l.w.Write([]byte{'\n'})
	return err
}

func newImageView(img Image) (*imageView, error) {
	marker, err := newMarker()
	if err != nil {
		return nil, err
	}
	v := &imageView{marker: marker, Image: img.Name, Role: img.Role, LockDigest: img.LockDigest, Epoch: img.SourceDateEpoch}
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
	lv, err := v.layer(l)
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
func (v *imageView) layer(l Layer) (layerView, error) {
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
		fv.Data = dataMarker(v.marker, len(v.files))
		v.files = append(v.files, f)
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
	if f.Open == nil {
		return fileView{}, fmt.Errorf("no content")
	}
	return fileView{Path: f.Path, Mode: unixMode(f.Mode), Owner: f.Owner, Group: f.Group}, nil
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
