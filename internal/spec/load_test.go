package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/labcluster/gpucluster/internal/testkit/golden"
	"github.com/labcluster/gpucluster/internal/tomlpos"
)

// load picks the loader for a test file by its name: image_*, site_* or
// a layer.
func load(path string) error {
	var err error
	switch base := filepath.Base(path); {
	case strings.HasPrefix(base, "image_"):
		_, err = LoadImage(path)
	case strings.HasPrefix(base, "site_"):
		_, err = LoadSite(path)
	default:
		_, err = LoadLayer(path)
	}
	return err
}

// TestLoadErrors loads every testdata/bad/*.toml and compares the error
// with the golden .err file beside it.
func TestLoadErrors(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".toml"), func(t *testing.T) {
			err := load(file)
			if err == nil {
				t.Fatal("loaded, want an error")
			}
			checkLocated(t, err, file)
			golden.Check(t, strings.TrimSuffix(file, ".toml")+".err", []byte(err.Error()+"\n"))
		})
	}
}

// checkLocated wants a *tomlpos.Error naming file, line and key, and a
// lowercase message.
func checkLocated(t *testing.T, err error, file string) {
	t.Helper()
	var e *tomlpos.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is a %T, want *tomlpos.Error", err, err)
	}
	if e.File != file || e.Line < 1 || e.Key == "" {
		t.Errorf("error %q is not located in %s", err, file)
	}
	if e.Msg == "" || strings.ToLower(e.Msg[:1]) != e.Msg[:1] {
		t.Errorf("message %q does not start lowercase", e.Msg)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := LoadLayer("testdata/nothere.toml")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v, want fs.ErrNotExist", err)
	}
}

// TestLoadLayerFull checks that every key lands in its field, with the
// defaults filled in.
func TestLoadLayerFull(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"files/x/motd": "hello\n",
		"full.toml": `name = "full"
description = "every key"
requires = ["base"]
packages = ["slurm"]
kernel_args = ["quiet"]
[[repos]]
id = "epel"
name = "EPEL"
baseurl = "https://example.org/epel/"
gpgkey = "https://example.org/key"
[[repos]]
id = "local"
baseurl = "file:///srv/local/"
gpgcheck = false
[modules]
enable = ["nvidia-driver:open-dkms"]
[[groups]]
name = "slurm"
gid = 981
[[users]]
name = "slurm"
uid = 981
gid = 981
home = "/var/lib/slurm"
shell = "/sbin/nologin"
comment = "Slurm"
[[files]]
path = "/etc/motd"
source = "files/x/motd"
[[files]]
path = "/usr/local/bin/x"
content = "#!/bin/sh\n"
mode = "04755"
owner = "slurm"
group = "slurm"
[services]
enable = ["munge"]
disable = ["kdump"]
[[run]]
command = "true"
description = "nothing"
[roles.master]
packages = ["slurm-slurmctld"]
services = { enable = ["slurmctld"] }
kernel_args = ["x=1"]
[[roles.master.run]]
command = "echo master"
[[roles.master.files]]
path = "/etc/m"
content = "m"
`,
	})
	l, err := LoadLayer(filepath.Join(dir, "full.toml"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Layer{
		Name: "full", Description: "every key", Requires: []string{"base"}, Packages: []string{"slurm"},
		KernelArgs: []string{"quiet"},
		Repos: []Repo{
			{ID: "epel", Name: "EPEL", BaseURL: "https://example.org/epel/", GPGKey: "https://example.org/key", GPGCheck: true},
			{ID: "local", BaseURL: "file:///srv/local/"},
		},
		Modules: Modules{Enable: []string{"nvidia-driver:open-dkms"}},
		Groups:  []Group{{Name: "slurm", GID: 981}},
		Users:   []User{{Name: "slurm", UID: 981, GID: 981, Home: "/var/lib/slurm", Shell: "/sbin/nologin", Comment: "Slurm"}},
		Files: []File{
			{Path: "/etc/motd", Source: "files/x/motd", Mode: 0o644, Owner: "root", Group: "root",
				LayersDir: dir, SourceSHA256: "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"}, // sha256 of "hello\n"
			{Path: "/usr/local/bin/x", Content: "#!/bin/sh\n", Mode: 0o755 | fs.ModeSetuid, Owner: "slurm", Group: "slurm"},
		},
		Services: Services{Enable: []string{"munge"}, Disable: []string{"kdump"}},
		Run:      []Command{{Command: "true", Description: "nothing"}},
		Roles: map[string]RoleParts{"master": {
			Packages: []string{"slurm-slurmctld"}, Services: Services{Enable: []string{"slurmctld"}},
			Files:      []File{{Path: "/etc/m", Content: "m", Mode: 0o644, Owner: "root", Group: "root"}},
			Run:        []Command{{Command: "echo master"}},
			KernelArgs: []string{"x=1"},
		}},
		Path:   filepath.Join(dir, "full.toml"),
		Digest: l.Digest,
		paths:  l.paths,
	}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("LoadLayer:\n got %+v\nwant %+v", l, want)
	}
	if len(l.Digest) != 64 {
		t.Errorf("digest %q is not sha256 hex", l.Digest)
	}
}

func TestLoadSite(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"site.toml": `
[repos.epel]
baseurl = "file:///srv/mirror/epel/"
gpgcheck = false
[repos.baseos]
gpgkey = ""
`})
	s, err := LoadSite(filepath.Join(dir, "site.toml"))
	if err != nil {
		t.Fatal(err)
	}
	url, no, empty := "file:///srv/mirror/epel/", false, ""
	want := map[string]RepoOverride{
		"epel":   {BaseURL: &url, GPGCheck: &no},
		"baseos": {GPGKey: &empty},
	}
	if !reflect.DeepEqual(s.Repos, want) {
		t.Errorf("repos %+v, want %+v", s.Repos, want)
	}
}

// writeFiles creates files (path relative to dir -> content).
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSourceSymlinks: a source is read inside the layers directory only. A symlink in it that
// leads out (to a host file, up and out, a directory of the host) is refused at its key; one
// that stays inside is followed.
func TestSourceSymlinks(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	writeFiles(t, filepath.Dir(outside), map[string]string{"secret": "host only\n"})
	tests := []struct {
		name, source string
		links        map[string]string // path in the layers directory -> target
		want         string            // "" when it loads
	}{
		{"to a host file", "files/conf", map[string]string{"files/conf": outside}, "files/conf: path escapes from parent"},
		{"up and out", "files/conf", map[string]string{"files/conf": "../../secret"}, "path escapes from parent"},
		{"through a directory of the host", "host/secret", map[string]string{"host": filepath.Dir(outside)}, "host/secret: path escapes"},
		{"inside", "files/conf", map[string]string{"files/conf": "motd"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "layers")
			path := filepath.Join(dir, "l.toml")
			writeFiles(t, filepath.Dir(dir), map[string]string{"secret": "beside the layers directory\n"})
			writeFiles(t, dir, map[string]string{"files/motd": "hello\n", "l.toml": "name = \"l\"\n[[files]]\npath = \"/etc/motd\"\nsource = \"" + tt.source + "\"\n"})
			for p, target := range tt.links {
				if err := os.Symlink(target, filepath.Join(dir, p)); err != nil {
					t.Fatal(err)
				}
			}
			l, err := LoadLayer(path)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if data, err := l.Files[0].Data(); string(data) != "hello\n" {
					t.Errorf("data %q, %v; want the file the link names", data, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one containing %q", err, tt.want)
			}
			checkLocated(t, err, path)
			if e := new(tomlpos.Error); errors.As(err, &e) && (e.Key != "files[0].source" || e.Line != 4) {
				t.Errorf("error at %d: %s, want 4: files[0].source", e.Line, e.Key)
			}
		})
	}
}

// TestSourceChangedAfterLoad: a source replaced after its layer loaded (by a symlink out of the
// layers directory, or by other bytes) is refused where the build reads it again, and the
// layer's digest still covers the bytes loaded: the image is never keyed by other bytes than
// it holds.
func TestSourceChangedAfterLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, src string) error
		want   string
	}{
		{"swapped for a symlink out", func(t *testing.T, src string) error {
			if err := os.Remove(src); err != nil {
				return err
			}
			return os.Symlink("/etc/hostname", src)
		}, "path escapes from parent"},
		{"edited", func(t *testing.T, src string) error {
			return os.WriteFile(src, []byte("edited\n"), 0o644)
		}, "changed while the build ran"},
		{"swapped for a FIFO (no writer: opening it for reading would wait)", func(t *testing.T, src string) error {
			if err := os.Remove(src); err != nil {
				return err
			}
			return syscall.Mkfifo(src, 0o644)
		}, "files/motd is not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"files/motd": "hello\n", "l.toml": "name = \"l\"\n[[files]]\npath = \"/etc/motd\"\nsource = \"files/motd\"\n"})
			l, err := LoadLayer(filepath.Join(dir, "l.toml"))
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.change(t, filepath.Join(dir, "files/motd")); err != nil {
				t.Fatal(err)
			}
			if d := l.digest(); d != l.Digest {
				t.Errorf("digest after the change = %s; want the one at load, %s", d, l.Digest)
			}
			if data, err := l.Files[0].Data(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("data %q, %v; want an error containing %q", data, err, tc.want)
			}
		})
	}
}

// TestRepoURLs: a repository URL is checked alike in a layer's [[repos]] and in a site's
// override, where dnf would otherwise fail much later: a file URL is read on this machine
// (no host but localhost), an http one needs a host.
func TestRepoURLs(t *testing.T) {
	tests := []struct {
		url  string
		want string // "" when it loads
	}{
		{"file:///srv/mirror/epel/", ""},
		{"file://localhost/srv/mirror/epel/", ""},
		{"file://LOCALHOST/srv/mirror/epel/", ""},
		{"file://127.0.0.1/srv/mirror/epel/", ""},
		{"file:/srv/mirror/epel/", ""}, // no authority at all: curl and dnf read it too
		{"https://dl.fedoraproject.org/pub/epel/9/Everything/x86_64/", ""},
		{"http://mirror.lab:8080/epel/", ""},
		{"file://srv/mirror/epel/", `"file://srv/mirror/epel/" names host "srv", but a file URL is read on this machine: want file:///srv/mirror/epel/ (three slashes)`},
		{"file://mirror.lab/epel/", `"file://mirror.lab/epel/" names host "mirror.lab", but a file URL is read on this machine: want file:///mirror.lab/epel/ (three slashes)`},
		{"file://localhost:8080/srv/", `"file://localhost:8080/srv/" names host "localhost:8080", but a file URL`},
		{"file://alice@localhost/srv/", `"file://alice@localhost/srv/" names a user, but a file URL is read on this machine (want file:///path)`},
		{"file://localhost", `"file://localhost" has no absolute path (want file:///path)`},
		{"http:/mirror.lab/epel/", `"http:/mirror.lab/epel/" names no host (want http://host/path)`},
		{"https:///epel/", `"https:///epel/" names no host (want https://host/path)`},
		{"/srv/mirror/epel/", `"/srv/mirror/epel/" is not an http, https or file URL`},
		{"ftp://mirror.lab/epel/", `"ftp://mirror.lab/epel/" is not an http, https or file URL`},
	}
	for _, tt := range tests {
		for _, in := range []struct {
			what, file, key string
			line            int
			load            func(string) error
		}{
			{"site", "site.toml", "repos.epel.baseurl", 2, func(p string) error { _, err := LoadSite(p); return err }},
			{"layer", "epel.toml", "repos[0].baseurl", 4, func(p string) error { _, err := LoadLayer(p); return err }},
		} {
			t.Run(in.what+"/"+tt.url, func(t *testing.T) {
				dir := t.TempDir()
				writeFiles(t, dir, map[string]string{
					"site.toml": "[repos.epel]\nbaseurl = \"" + tt.url + "\"\n",
					"epel.toml": "name = \"epel\"\n[[repos]]\nid = \"epel\"\nbaseurl = \"" + tt.url + "\"\n",
				})
				path := filepath.Join(dir, in.file)
				err := in.load(path)
				if tt.want == "" {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					return
				}
				if want := fmt.Sprintf("%s:%d: %s: %s", path, in.line, in.key, tt.want); err == nil || !strings.HasPrefix(err.Error(), want) {
					t.Fatalf("error %v, want one starting %q", err, want)
				}
			})
		}
	}
}
