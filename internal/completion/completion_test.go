package completion

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// toy is a program with every kind of value.
var toy = Program{
	Name:    "toy",
	Forward: []string{"out"},
	Commands: []Command{
		{Name: "run", Flags: []Flag{{Name: "out", Values: Dirs}, {Name: "fmt", Values: Words("text", "json")}, {Name: "verbose"}},
			Args: []Values{Glob("*.toml"), Ask("things")}},
		{Name: "stop", Args: []Values{Ask("things"), None}},
	},
}

// askingToy is the toy program's __complete: it logs how it was asked and offers three things.
const askingToy = `#!/bin/sh
echo "$*" >> "$TOY_LOG"
[ "$1" = __complete ] || exit 1
printf 'alpha\nbeta\n52:54:00:00:00:01\n'
`

// shellEnv puts the toy program first on PATH, in a directory that also holds a.toml, b.txt
// and a directory d, the working directory of the shell.
func shellEnv(t *testing.T) (dir string, env []string) {
	t.Helper()
	dir = t.TempDir()
	for name, data := range map[string]string{"toy": askingToy, "a.toml": "", "b.txt": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, []string{"PATH=" + dir + ":" + os.Getenv("PATH"), "TOY_LOG=" + filepath.Join(dir, "asked.log"), "HOME=" + dir}
}

// bashDriver loads the script, checks that bash registered it, and completes $LINE as bash
// does at the end of the line: COMP_LINE and COMP_POINT set, the default COMP_WORDBREAKS.
const bashDriver = `set -u
source "$SCRIPT"
complete -p "$PROG" | grep -qx "complete -F _$PROG $PROG" || { echo "not registered: $(complete -p "$PROG")"; exit 3; }
COMP_LINE=$LINE
COMP_POINT=${#LINE}
COMP_WORDBREAKS=$' \t\n"'"'"'><=;|&(:'
_$PROG
printf '%s\n' "${COMPREPLY[@]}"
`

// zshDriver loads the script outside the completion system and calls its function with the
// completion system's words and CURRENT, with compadd and _files printing what they are given:
// the script's own logic in the real zsh, not zsh's menus.
const zshDriver = `compadd() { local i=${@[(i)--]}; print -rl -- "${@[i+1,-1]}" }
_files() { print -r -- "_files $*" }
source "$SCRIPT"
words=(${(z)LINE})
[[ $LINE == *' ' ]] && words+=('')
CURRENT=${#words}
_$PROG
`

// Complete runs shell's completion of line with the script of p and returns its candidates.
func complete(t *testing.T, p Program, shell, line, dir string, env []string) []string {
	t.Helper()
	script, err := Script(p, shell)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), p.Name+"."+shell)
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	driver := map[string]string{"bash": bashDriver, "zsh": zshDriver}[shell]
	cmd := exec.Command(shell, "-c", driver)
	if shell == "zsh" {
		cmd = exec.Command("zsh", "-f", "-c", driver)
	}
	cmd.Dir = dir
	cmd.Env = append(env, "SCRIPT="+path, "LINE="+line, "PROG="+p.Name)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s completing %q: %v\n%s", shell, line, err, out)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if l != "" {
			got = append(got, l)
		}
	}
	slices.Sort(got)
	return got
}

func requireShells(t *testing.T) {
	t.Helper()
	for _, sh := range Shells {
		if _, err := exec.LookPath(sh); err != nil {
			t.Fatalf("%s not installed (Debian: %s; scripts/setup-debian.sh installs it)", sh, sh)
		}
	}
}

func TestScripts(t *testing.T) {
	requireShells(t)
	tests := []struct {
		name, line string
		bash, zsh  []string // sorted
		asked      string   // how the toy program was asked, "" for not at all
	}{
		{"commands", "toy ", []string{"run", "stop"}, []string{"run", "stop"}, ""},
		{"a command's prefix", "toy s", []string{"stop"}, []string{"run", "stop"}, ""},
		{"flags", "toy run --", []string{"--fmt", "--out", "--verbose"}, []string{"--fmt", "--out", "--verbose"}, ""},
		{"a flag's words", "toy run --fmt ", []string{"json", "text"}, []string{"json", "text"}, ""},
		{"a flag's directories", "toy run --out ", []string{"d"}, []string{"_files -/"}, ""},
		{"the first argument: globbed files and directories", "toy run ", []string{"a.toml", "d"}, []string{"_files -g *.toml"}, ""},
		{"a flag's value is no argument", "toy run --out d ", []string{"a.toml", "d"}, []string{"_files -g *.toml"}, ""},
		{"later arguments: asked, with the forwarded flag", "toy run --out /srv --verbose x.toml ",
			[]string{"52:54:00:00:00:01", "alpha", "beta"}, []string{"52:54:00:00:00:01", "alpha", "beta"}, "__complete --out /srv things -- x.toml"},
		{"asked candidates by prefix", "toy stop al", []string{"alpha"}, []string{"52:54:00:00:00:01", "alpha", "beta"}, "__complete things --"},
		{"a MAC: bash replaces what follows the last colon", "toy stop 52:54:00:00:0", []string{"00:01"}, []string{"52:54:00:00:00:01", "alpha", "beta"}, "__complete things --"},
		{"no more arguments", "toy stop alpha ", nil, nil, ""},
	}
	for _, shell := range Shells {
		for _, tt := range tests {
			t.Run(shell+"/"+tt.name, func(t *testing.T) {
				dir, env := shellEnv(t)
				got := complete(t, toy, shell, tt.line, dir, env)
				want := map[string][]string{"bash": tt.bash, "zsh": tt.zsh}[shell]
				if !slices.Equal(got, want) {
					t.Errorf("completing %q: %q, want %q", tt.line, got, want)
				}
				asked, _ := os.ReadFile(filepath.Join(dir, "asked.log"))
				if strings.TrimSpace(string(asked)) != tt.asked {
					t.Errorf("toy was asked %q, want %q", asked, tt.asked)
				}
			})
		}
	}
}

// The zsh script's first line makes it a completion function in $fpath; sourced, it registers
// itself with compdef when the completion system is loaded.
func TestZshRegisters(t *testing.T) {
	requireShells(t)
	script, err := Script(toy, "zsh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(script, "#compdef toy\n") {
		t.Fatalf("first line %q", strings.SplitN(script, "\n", 2)[0])
	}
	path := filepath.Join(t.TempDir(), "_toy")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("zsh", "-f", "-c", `autoload -U compinit && compinit -u -D && source "$1" && print -r -- "$_comps[toy]"`, "zsh", path).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "_toy" {
		t.Fatalf("zsh: %v: %q, want toy completed by _toy", err, out)
	}
}

func TestScriptRefuses(t *testing.T) {
	for _, p := range []Program{{Name: "toy;rm"}, {Name: "toy", Commands: []Command{{Name: "a b"}}},
		{Name: "toy", Commands: []Command{{Name: "run", Flags: []Flag{{Name: "$(x)"}}}}}} {
		if _, err := Script(p, "bash"); err == nil {
			t.Errorf("Script(%+v) accepted", p)
		}
	}
	if _, err := Script(toy, "fish"); err == nil {
		t.Error("a fish script")
	}
}
