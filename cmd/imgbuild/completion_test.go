package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/completion"
)

// TestMain lets the test binary be imgbuild itself, for the completion scripts to ask.
func TestMain(m *testing.M) {
	if os.Getenv("IMGBUILD_TEST_AS_IMGBUILD") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestCompletion: bash and zsh complete imgbuild's commands, image files, and the images and
// versions of an images directory, through `imgbuild __complete`.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh"} {
		if _, err := exec.LookPath(sh); err != nil {
			t.Fatalf("%s not installed (scripts/setup-debian.sh installs it)", sh)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir() // the shell's directory: an image file, a layer, and an images directory
	out := filepath.Join(work, "out")
	for _, f := range []string{"images/compute.toml", "images/compute.lock.json", "out/compute/2026.11.21-1/manifest.json",
		"out/compute/2026.11.22-1/manifest.json", "out/compute/.tmp-2026.11.23-1/vmlinuz", "out/master/1/manifest.json"} {
		p := filepath.Join(work, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, "imgbuild")); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "IMGBUILD_TEST_AS_IMGBUILD=1", "HOME=" + bin}
	o := " --out " + out + " "
	tests := []struct {
		name, line string
		bash, zsh  []string
	}{
		{"commands", "imgbuild ", []string{"build", "completion", "diff", "list", "lock"}, []string{"build", "completion", "diff", "list", "lock"}},
		{"an image file", "imgbuild build images/", []string{"images/compute.toml"}, []string{"_files -g *.toml"}},
		{"a version is not guessed", "imgbuild build --version ", nil, nil},
		{"images", "imgbuild diff" + o, []string{"compute", "master"}, []string{"compute", "master"}},
		{"versions of the image", "imgbuild diff" + o + "compute ", []string{"2026.11.21-1", "2026.11.22-1"}, []string{"2026.11.21-1", "2026.11.22-1"}},
		{"the second version", "imgbuild diff compute 2026.11.21-1" + o + "2026.11.2", []string{"2026.11.21-1", "2026.11.22-1"},
			[]string{"2026.11.21-1", "2026.11.22-1"}},
		{"list", "imgbuild list" + o + "m", []string{"master"}, []string{"compute", "master"}},
		{"flags", "imgbuild build --k", []string{"--keep-cache"}, []string{"--cache", "--keep-cache", "--layers", "--log-format", "--out", "--package-archive", "--q", "--site", "--version"}},
	}
	drivers := map[string][]string{
		"bash": {"bash", "-c", `source <(imgbuild completion bash)
complete -p imgbuild | grep -qx "complete -F _imgbuild imgbuild" || exit 3
COMP_LINE=$LINE; COMP_POINT=${#LINE}; COMP_WORDBREAKS=$' \t\n"'"'"'><=;|&(:'
_imgbuild
printf '%s\n' "${COMPREPLY[@]}"`},
		"zsh": {"zsh", "-f", "-c", `compadd() { local i=${@[(i)--]}; print -rl -- "${@[i+1,-1]}" }
_files() { print -r -- "_files $*" }
source <(imgbuild completion zsh)
words=(${(z)LINE}); [[ $LINE == *' ' ]] && words+=(''); CURRENT=${#words}
_imgbuild`},
	}
	for _, sh := range []string{"bash", "zsh"} {
		for _, tt := range tests {
			t.Run(sh+"/"+tt.name, func(t *testing.T) {
				d := drivers[sh]
				cmd := exec.Command(d[0], d[1:]...)
				cmd.Dir = work
				cmd.Env = append(env, "LINE="+tt.line)
				got, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%v\n%s", err, got)
				}
				words := strings.Split(strings.TrimSpace(string(got)), "\n")
				words = slices.DeleteFunc(words, func(s string) bool { return s == "" })
				slices.Sort(words)
				if want := map[string][]string{"bash": tt.bash, "zsh": tt.zsh}[sh]; !slices.Equal(words, want) {
					t.Errorf("completing %q: %q, want %q", tt.line, words, want)
				}
			})
		}
	}
}

// TestCompletionFlags keeps the completion table in step with the commands' flags.
func TestCompletionFlags(t *testing.T) {
	flagLine := regexp.MustCompile(`(?m)^  -(\S+)`)
	for _, c := range imgbuildCompletion.Commands {
		t.Run(c.Name, func(t *testing.T) {
			help := captureStderr(t, func() error { return commands[c.Name](context.Background(), []string{"--help"}) })
			var want, got []string
			for _, m := range flagLine.FindAllStringSubmatch(help, -1) {
				want = append(want, m[1])
			}
			for _, f := range c.Flags {
				got = append(got, f.Name)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("completion offers %q, imgbuild %s --help lists %q", got, c.Name, want)
			}
		})
	}
	for name := range commands {
		if !slices.ContainsFunc(imgbuildCompletion.Commands, func(c completion.Command) bool { return c.Name == name }) && name != completeCommand {
			t.Errorf("command %s is not completed", name)
		}
	}
}

// captureStderr runs f with os.Stderr going to a buffer, where the flag package prints help.
func captureStderr(t *testing.T, f func() error) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	var buf bytes.Buffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&buf, r); close(copied) }()
	ferr := f()
	os.Stderr = old
	w.Close()
	<-copied
	if ferr != nil && !errors.Is(ferr, flag.ErrHelp) {
		t.Fatalf("--help: %v", ferr)
	}
	return buf.String()
}
