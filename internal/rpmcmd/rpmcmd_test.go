package rpmcmd_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/rpmcmd"
	"github.com/labcluster/gpucluster/internal/sandbox"
	"github.com/labcluster/gpucluster/internal/testkit/sandboxtest"
	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
)

// fixture builds a repo where a's %post runs in the image: a -> b -> bash.
func fixture(t *testing.T) (string, []string) {
	t.Helper()
	repo := t.TempDir()
	a := testrepo.Package{Name: "a", Requires: []string{"b"}, Files: map[string]string{"/usr/share/a/hello": "a\n"}}
	a.Scripts.Post = "echo post-a > /var/lib/post-a\nwc -c /usr/share/a/hello >> /var/lib/post-a"
	pkgs := append(testrepo.Standins([]string{"bash", "munge"}, testrepo.KernelFiles{}), a,
		testrepo.Package{Name: "b", Requires: []string{"bash"}, Files: map[string]string{"/usr/share/b/hello": "b\n"}})
	if err := testrepo.Build(testrepo.Context(t), repo, pkgs); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(repo, "Packages", "*", "*.rpm"))
	if err != nil {
		t.Fatal(err)
	}
	return repo, files
}

func sum(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

func queryAll(t *testing.T, root string) string {
	t.Helper()
	env := &rpmcmd.Env{Root: root, WorkDir: t.TempDir(), Log: testrepo.QuietLog()}
	out, err := env.RPM(testrepo.Context(t), "-qa", "--qf", "%{NAME}\n")
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(string(out))
	sort.Strings(names)
	return strings.Join(names, " ")
}

func TestInstallFiles(t *testing.T) {
	testrepo.NeedTools(t, "dnf")
	_, files := fixture(t)
	var dbs []string
	for i := 0; i < 2; i++ {
		root := t.TempDir()
		// Reverse order the second time: the result must not depend on it.
		given := append([]string{}, files...)
		if i == 1 {
			sort.Sort(sort.Reverse(sort.StringSlice(given)))
		}
		opt := rpmcmd.InstallOptions{WorkDir: t.TempDir(), SourceDateEpoch: 1700000000, Log: testrepo.QuietLog()}
		if err := rpmcmd.InstallFiles(testrepo.Context(t), root, given, opt); err != nil {
			t.Fatal(err)
		}
		if got, want := queryAll(t, root), "a b bash filesystem munge setup"; got != want {
			t.Errorf("rpm -qa: %q, want %q", got, want)
		}
		post, err := os.ReadFile(filepath.Join(root, "var/lib/post-a"))
		if err != nil || !strings.HasPrefix(string(post), "post-a\n2 ") {
			t.Errorf("%%post of a did not run in the image: %q, %v", post, err)
		}
		for _, f := range []string{"usr/share/a/hello", "usr/share/b/hello", "usr/lib/systemd/system/munge.service"} {
			if _, err := os.Stat(filepath.Join(root, f)); err != nil {
				t.Error(err)
			}
		}
		if _, err := os.Stat(filepath.Join(root, "root/.rpmdb")); err == nil {
			t.Error("rpm used Debian's ~/.rpmdb inside the image")
		}
		// The whole database directory, not only rpmdb.sqlite.
		var db []string
		entries, err := os.ReadDir(filepath.Join(root, rpmcmd.DBPath))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			db = append(db, e.Name()+"="+sum(t, filepath.Join(root, rpmcmd.DBPath, e.Name())))
		}
		dbs = append(dbs, strings.Join(db, " "))
	}
	if dbs[0] != dbs[1] {
		t.Errorf("rpm database differs between two installs:\n%s\n%s", dbs[0], dbs[1])
	}
}

func TestInstallFilesRefusesIncompleteSet(t *testing.T) {
	testrepo.NeedTools(t, "dnf")
	_, files := fixture(t)
	var noB []string
	for _, f := range files {
		if !strings.Contains(filepath.Base(f), "b-1.0") {
			noB = append(noB, f)
		}
	}
	err := rpmcmd.InstallFiles(testrepo.Context(t), t.TempDir(), noB, rpmcmd.InstallOptions{})
	if err == nil || !strings.Contains(err.Error(), "b is needed by a") {
		t.Errorf("err %v, want rpm's dependency failure", err)
	}
}

// TestDNFInstall installs with dnf from the generated configuration, as an
// image build could, and checks that nothing of the host leaked in.
func TestDNFInstall(t *testing.T) {
	testrepo.NeedTools(t, "dnf")
	repo, _ := fixture(t)
	root := t.TempDir()
	env := &rpmcmd.Env{
		Root: root, WorkDir: t.TempDir(), ReleaseVer: "9", Arch: "x86_64", Log: testrepo.QuietLog(),
		SourceDateEpoch: 1700000000,
		Repos:           []rpmcmd.Repo{{ID: "baseos", Name: "BaseOS", BaseURL: "file://" + repo}},
	}
	if _, err := env.DNF(testrepo.Context(t), "install", "a"); err != nil {
		t.Fatal(err)
	}
	if got, want := queryAll(t, root), "a b bash filesystem setup"; got != want {
		t.Errorf("installed %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(root, rpmcmd.DBPath, "rpmdb.sqlite")); err != nil {
		t.Errorf("rpm database not in %s: %v", rpmcmd.DBPath, err)
	}
	_, err := env.DNF(testrepo.Context(t), "install", "nosuch")
	if err == nil || !strings.Contains(err.Error(), "Unable to find a match: nosuch") {
		t.Errorf("err %v, want dnf's reason in it", err)
	}
}

func TestEnvRefusesBadSetup(t *testing.T) {
	tmp := t.TempDir()
	tests := []struct {
		name string
		env  rpmcmd.Env
		want string
	}{
		{"host root", rpmcmd.Env{Root: "/", WorkDir: tmp}, "other than /"},
		{"relative root", rpmcmd.Env{Root: "root", WorkDir: tmp}, "absolute"},
		{"work dir in root", rpmcmd.Env{Root: tmp, WorkDir: tmp + "/w"}, "inside the image root"},
		{"bad repo id", rpmcmd.Env{Root: tmp + "/r", WorkDir: tmp + "/w", Repos: []rpmcmd.Repo{{ID: "a b", BaseURL: "file:///x"}}}, "repo id"},
		{"newline", rpmcmd.Env{Root: tmp + "/r", WorkDir: tmp + "/w", Repos: []rpmcmd.Repo{{ID: "a", BaseURL: "file:///x\ngpgcheck=0"}}}, "line break"},
		{"gpgcheck without key", rpmcmd.Env{Root: tmp + "/r", WorkDir: tmp + "/w", Repos: []rpmcmd.Repo{{ID: "a", BaseURL: "file:///x", GPGCheck: true}}}, "no gpgkey"},
		{"repo twice", rpmcmd.Env{Root: tmp + "/r", WorkDir: tmp + "/w", Repos: []rpmcmd.Repo{{ID: "a", BaseURL: "file:///x"}, {ID: "a", BaseURL: "file:///y"}}}, "twice"},
	}
	for _, tt := range tests {
		_, err := tt.env.DNF(context.Background(), "makecache")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestTail(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"a\n\nb\nc\n", 2, "b\nc"},
		{"a\n", 5, "a"},
		{"", 3, ""},
	}
	for _, tt := range tests {
		if got := rpmcmd.Tail(tt.in, tt.n); got != tt.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// TestScriptletsAreSandboxed installs one package per escape whose %post tries it: each attempt
// fails inside the image (its %post records the outcome there) and the host shows nothing of it.
func TestScriptletsAreSandboxed(t *testing.T) {
	testrepo.NeedTools(t, sandbox.Program)
	escapes := sandboxtest.Escapes(t)
	pkgs := testrepo.Standins([]string{"bash"}, testrepo.KernelFiles{})
	for i, e := range escapes {
		script := fmt.Sprintf("/usr/share/escape/%d.sh", i)
		p := testrepo.Package{Name: fmt.Sprintf("escape-%d", i), Requires: []string{"bash"}, Files: map[string]string{script: e.Command + "\n"}}
		p.Scripts.Post = fmt.Sprintf("mkdir -p /var/lib/escape\nif /bin/sh %s; then echo escaped > /var/lib/escape/%d; else echo held > /var/lib/escape/%d; fi", script, i, i)
		pkgs = append(pkgs, p)
	}
	repo := t.TempDir()
	if err := testrepo.Build(testrepo.Context(t), repo, pkgs); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(repo, "Packages", "*", "*.rpm"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := rpmcmd.InstallFiles(testrepo.Context(t), root, files, rpmcmd.InstallOptions{Log: testrepo.QuietLog()}); err != nil {
		t.Fatal(err)
	}
	for i, e := range escapes {
		t.Run(e.Name, func(t *testing.T) {
			got, err := os.ReadFile(filepath.Join(root, "var/lib/escape", strconv.Itoa(i)))
			if err != nil || string(got) != "held\n" {
				t.Errorf("the %%post recorded %q (%v), want held", got, err)
			}
			e.Held(t)
		})
	}
}
