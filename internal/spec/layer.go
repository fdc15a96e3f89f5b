package spec

import (
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
)

// Layer is one layers/<name>.toml: what a step of the image build adds.
type Layer struct {
	Name        string
	Description string
	Requires    []string // layers that must come before this one
	Packages    []string // installed in every role
	KernelArgs  []string
	Repos       []Repo
	Modules     Modules
	Groups      []Group // created, like Users, before any package installs
	Users       []User
	Files       []File // written after the packages
	Services    Services
	Run         []Command // run in the image after the files
	Roles       map[string]RoleParts
	Path        string // the file, as given to LoadLayer
	Digest      string // sha256 (hex) of the canonical definition and its input files' contents

	paths map[string]int // key path -> line in Path, for Resolve's errors
}

// Repo is a dnf repository. BaseURL, GPGKey and Archive may name $releasever and $basearch,
// which Resolve fills in from the image.
type Repo struct {
	ID, Name, BaseURL, GPGKey string
	GPGCheck                  bool
	// Archive is where a package of this repository stays once the mirror has dropped it: a URL
	// template with per-package fields (ArchiveFields), e.g. Rocky's vault for the pinned minor
	// release. The lock records each package's archive URL; build fetches from it when the
	// baseurl no longer has the file. Empty: the repository keeps old packages itself.
	Archive string
}

// Modules are dnf module streams, enabled before the packages install.
type Modules struct {
	Enable []string // name:stream
}

// Group is a group created with a fixed gid.
type Group struct {
	Name string
	GID  int
}

// User is a user created with a fixed uid: ids must agree on every node
// that shares files (munge, slurm), so packages must not pick them.
type User struct {
	Name                 string
	UID, GID             int
	Home, Shell, Comment string
}

// File is a file written into the image, from Source or Content.
type File struct {
	Path    string // absolute, in the image
	Source  string // relative to the layers directory
	Content string
	Mode    fs.FileMode
	Owner   string
	Group   string
	// LayersDir is the absolute directory Source is relative to ("" for Content). Sources are
	// read only inside it, through os.Root (File.Data): a symlink out of it is refused.
	LayersDir string
	// SourceSHA256 is Source's sha256 (hex) when the layer was loaded: the layer's digest, and
	// so the image's and the cache's keys, cover these bytes, and Data refuses others.
	SourceSHA256 string
}

// Services are systemd units to enable or disable.
type Services struct {
	Enable, Disable []string
}

// Command is a shell command run inside the image, in the build sandbox.
type Command struct {
	Command, Description string
	// Network gives the command the build host's network; without it the command has none. The
	// digest leaves it out when false, so layers that never set it keep their digests.
	Network bool `json:",omitempty"`
}

// RoleParts is what a layer adds only to images of one role.
type RoleParts struct {
	Packages   []string
	Services   Services
	Files      []File
	Run        []Command
	KernelArgs []string
}

// roleNames are the roles an image can have.
var roleNames = []string{"compute", "master"}

// LoadLayer reads and checks the layer file at path. File sources are
// relative to the file's directory and must exist.
func LoadLayer(path string) (*Layer, error) {
	r, t, err := open(path)
	if err != nil {
		return nil, err
	}
	l := readLayer(t)
	checkFileName(t, l.Name)
	dir := filepath.Dir(path)
	for i := range l.Files {
		findSource(t.r, dir, item("files", i), &l.Files[i])
	}
	for _, role := range sorted(keys(l.Roles)) {
		for i := range l.Roles[role].Files {
			findSource(t.r, dir, item("roles."+role+".files", i), &l.Roles[role].Files[i])
		}
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	l.Path, l.paths = path, r.paths
	l.Digest = l.digest()
	return l, nil
}

// checkFileName wants name to be the file's name: images list layers by
// name and the loader finds them by file name.
func checkFileName(t table, name string) {
	want := strings.TrimSuffix(filepath.Base(t.r.file), filepath.Ext(t.r.file))
	if name != want {
		t.r.fail("name", "%q does not match the file name (want %q)", name, want)
	}
}

var layerKeys = []string{"name", "description", "requires", "packages", "kernel_args", "repos",
	"modules", "groups", "users", "files", "services", "run", "roles"}

func readLayer(t table) *Layer {
	t.only(layerKeys...)
	t.required("name")
	l := &Layer{
		Name:        t.str("name"),
		Description: t.str("description"),
		Requires:    t.strs("requires", checkName),
		Packages:    t.strs("packages", checkPackage),
		KernelArgs:  t.strs("kernel_args", checkKernelArg),
		Repos:       readRepos(t),
		Modules:     readModules(t.sub("modules")),
		Groups:      readGroups(t),
		Users:       readUsers(t),
		Files:       readFiles(t),
		Services:    readServices(t.sub("services")),
		Run:         readRun(t),
		Roles:       readRoles(t.sub("roles")),
	}
	if msg := checkName(l.Name); msg != "" {
		t.r.fail("name", "%s", msg)
	}
	for i, req := range l.Requires {
		if req == l.Name {
			t.r.fail(item("requires", i), "a layer cannot require itself")
		}
	}
	return l
}

func readRepos(t table) []Repo {
	var repos []Repo
	for _, rt := range t.list("repos") {
		rt.only("id", "name", "baseurl", "gpgkey", "gpgcheck", "archive")
		rt.required("id", "baseurl")
		r := Repo{ID: rt.str("id"), Name: rt.str("name"), BaseURL: rt.str("baseurl"),
			GPGKey: rt.str("gpgkey"), GPGCheck: rt.boolean("gpgcheck", true), Archive: rt.str("archive")}
		check(rt, "id", checkRepoID(r.ID))
		check(rt, "name", checkPrintable(r.Name))
		check(rt, "baseurl", checkRepoURL(r.BaseURL))
		if r.GPGKey != "" {
			check(rt, "gpgkey", checkRepoURL(r.GPGKey))
		}
		if r.Archive != "" {
			check(rt, "archive", checkArchive(r.Archive))
		}
		repos = append(repos, r)
	}
	return repos
}

// check fails at key k of t with msg, unless msg is "" (no mistake).
func check(t table, k, msg string) {
	if msg != "" {
		t.r.fail(t.key(k), "%s", msg)
	}
}

func readModules(t table) Modules {
	t.only("enable")
	return Modules{Enable: t.strs("enable", checkModule)}
}

func readGroups(t table) []Group {
	var groups []Group
	for _, gt := range t.list("groups") {
		gt.only("name", "gid")
		gt.required("name", "gid")
		g := Group{Name: gt.str("name"), GID: gt.integer("gid")}
		check(gt, "name", checkAccount(g.Name))
		check(gt, "gid", checkID(g.GID))
		groups = append(groups, g)
	}
	return groups
}

func readUsers(t table) []User {
	var users []User
	for _, ut := range t.list("users") {
		ut.only("name", "uid", "gid", "home", "shell", "comment")
		ut.required("name", "uid", "gid")
		u := User{Name: ut.str("name"), UID: ut.integer("uid"), GID: ut.integer("gid"),
			Home: ut.str("home"), Shell: ut.str("shell"), Comment: ut.str("comment")}
		check(ut, "name", checkAccount(u.Name))
		check(ut, "uid", checkID(u.UID))
		check(ut, "gid", checkID(u.GID))
		if u.Home != "" {
			check(ut, "home", checkPasswdPath(u.Home))
		}
		if u.Shell != "" {
			check(ut, "shell", checkPasswdPath(u.Shell))
		}
		check(ut, "comment", checkComment(u.Comment))
		users = append(users, u)
	}
	return users
}

func readServices(t table) Services {
	t.only("enable", "disable")
	s := Services{Enable: t.strs("enable", checkService), Disable: t.strs("disable", checkService)}
	for i, name := range s.Disable {
		for _, e := range s.Enable {
			if e == name {
				t.r.fail(item(t.key("disable"), i), "%q is also enabled", name)
			}
		}
	}
	return s
}

func readRun(t table) []Command {
	var run []Command
	for _, ct := range t.list("run") {
		ct.only("command", "description", "network")
		ct.required("command")
		c := Command{Command: ct.str("command"), Description: ct.str("description"), Network: ct.boolean("network", false)}
		if strings.TrimSpace(c.Command) == "" {
			ct.r.fail(ct.key("command"), "empty command")
		}
		if strings.ContainsRune(c.Command, 0) {
			ct.r.fail(ct.key("command"), "a NUL character, which no command line can carry")
		}
		run = append(run, c)
	}
	return run
}

func readRoles(t table) map[string]RoleParts {
	if t.m == nil {
		return nil
	}
	roles := map[string]RoleParts{}
	for _, role := range t.keys() {
		rt := t.sub(role)
		if !slices.Contains(roleNames, role) {
			t.r.fail(rt.path, "unknown role (known: %s)", strings.Join(roleNames, ", "))
			continue
		}
		rt.only("packages", "services", "files", "run", "kernel_args")
		roles[role] = RoleParts{
			Packages:   rt.strs("packages", checkPackage),
			Services:   readServices(rt.sub("services")),
			Files:      readFiles(rt),
			Run:        readRun(rt),
			KernelArgs: rt.strs("kernel_args", checkKernelArg),
		}
	}
	return roles
}
