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
	"time"

	"github.com/labcluster/gpucluster/internal/check"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/tftpd"
)

// TestMain lets the test binary be bootd itself, for the completion scripts to ask.
func TestMain(m *testing.M) {
	if os.Getenv("BOOTD_TEST_AS_BOOTD") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// daemon answers the control socket as a bootd with master, c1 and c2 assigned and two
// machines waiting.
type daemon struct{}

func (daemon) Nodes() ctl.NodesReply { return ctl.NodesReply{} }
func (daemon) Assign(ctl.AssignRequest) (inventory.Assignment, error) {
	return inventory.Assignment{}, errors.New("not here")
}
func (daemon) BootImage(string) ctl.BootImage { return ctl.BootImage{} }
func (daemon) Unassign(string) (inventory.Node, error) {
	return inventory.Node{}, errors.New("not here")
}
func (daemon) Power(context.Context, ctl.PowerRequest) (ctl.PowerReply, error) {
	return ctl.PowerReply{}, errors.New("not here")
}
func (daemon) SetBMCPassword(ctl.BMCPasswordRequest) error { return errors.New("not here") }
func (daemon) Check(context.Context, []string, func(string)) (check.Report, error) {
	return check.Report{}, errors.New("not here")
}
func (daemon) Names() ctl.Names {
	return ctl.Names{Nodes: []string{"c1", "c2", "master"}, Waiting: []string{"52:54:00:12:34:56", "52:54:00:ab:cd:ef"}, Free: []string{"c3"}}
}

// runningDaemon serves the control socket in a state directory of its own and returns it.
func runningDaemon(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Serve(ctx, filepath.Join(dir, ctl.SocketName), daemon{}) }()
	t.Cleanup(func() { cancel(); <-done })
	for range 100 {
		if _, err := os.Stat(filepath.Join(dir, ctl.SocketName)); err == nil {
			return dir
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("control socket did not appear")
	return ""
}

// asBootd puts this test binary on PATH as bootd and returns the environment for a shell.
func asBootd(t *testing.T) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, "bootd")); err != nil {
		t.Fatal(err)
	}
	return []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "BOOTD_TEST_AS_BOOTD=1", "HOME=" + bin}
}

// The drivers: as in internal/completion's tests, bash completes COMP_LINE at its end with the
// default word breaks; zsh calls the function with the completion system's words and CURRENT.
const (
	bashDriver = `source <(bootd completion bash)
complete -p bootd | grep -qx "complete -F _bootd bootd" || exit 3
COMP_LINE=$LINE; COMP_POINT=${#LINE}; COMP_WORDBREAKS=$' \t\n"'"'"'><=;|&(:'
_bootd
printf '%s\n' "${COMPREPLY[@]}"
`
	zshDriver = `compadd() { local i=${@[(i)--]}; print -rl -- "${@[i+1,-1]}" }
source <(bootd completion zsh)
words=(${(z)LINE}); [[ $LINE == *' ' ]] && words+=(''); CURRENT=${#words}
_bootd
`
)

// TestCompletionAsksTheDaemon: bash and zsh complete node names, waiting MACs and free names
// from the running daemon, through `bootd __complete` and the control socket.
func TestCompletionAsksTheDaemon(t *testing.T) {
	for _, sh := range []string{"bash", "zsh"} {
		if _, err := exec.LookPath(sh); err != nil {
			t.Fatalf("%s not installed (scripts/setup-debian.sh installs it)", sh)
		}
	}
	state := runningDaemon(t)
	env := asBootd(t)
	sd := " --state-dir " + state + " "
	tests := []struct {
		name, line string
		bash, zsh  []string
	}{
		{"commands", "bootd ", []string{"assign", "check", "completion", "nodes", "power", "serve", "unassign"},
			[]string{"assign", "check", "completion", "nodes", "power", "serve", "unassign"}},
		{"check: node names", "bootd check" + sd + "c2 ", []string{"c1", "c2", "master"}, []string{"c1", "c2", "master"}},
		{"power's actions", "bootd power ", []string{"cycle", "off", "on", "password", "status"}, []string{"cycle", "off", "on", "password", "status"}},
		{"node names from the daemon", "bootd power on" + sd, []string{"c1", "c2", "master"}, []string{"c1", "c2", "master"}},
		{"more node names", "bootd power on" + sd + "c1 c", []string{"c1", "c2"}, []string{"c1", "c2", "master"}},
		{"unassign a node", "bootd unassign" + sd, []string{"c1", "c2", "master"}, []string{"c1", "c2", "master"}},
		{"assign: the next free name", "bootd assign" + sd, []string{"c3"}, []string{"c3"}},
		{"assign --mac: the waiting machines", "bootd assign c3" + sd + "--mac ", []string{"52:54:00:12:34:56", "52:54:00:ab:cd:ef"},
			[]string{"52:54:00:12:34:56", "52:54:00:ab:cd:ef"}},
		{"a MAC half typed", "bootd assign c3" + sd + "--mac 52:54:00:a", []string{"ab:cd:ef"}, []string{"52:54:00:12:34:56", "52:54:00:ab:cd:ef"}},
		{"flags", "bootd nodes --", []string{"--config", "--json", "--state-dir"}, []string{"--config", "--json", "--state-dir"}},
		{"no daemon: nothing, quickly", "bootd power on --state-dir /nonexistent ", nil, nil},
	}
	for _, sh := range []string{"bash", "zsh"} {
		for _, tt := range tests {
			t.Run(sh+"/"+tt.name, func(t *testing.T) {
				driver := map[string]string{"bash": bashDriver, "zsh": zshDriver}[sh]
				args := []string{"-c", driver}
				if sh == "zsh" {
					args = append([]string{"-f"}, args...)
				}
				cmd := exec.Command(sh, args...)
				cmd.Env = append(env, "LINE="+tt.line)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				got := strings.Fields(string(out))
				slices.Sort(got)
				if want := map[string][]string{"bash": tt.bash, "zsh": tt.zsh}[sh]; !slices.Equal(got, want) {
					t.Errorf("completing %q: %q, want %q", tt.line, got, want)
				}
			})
		}
	}
}

// TestCompletionFlags keeps the completion table in step with the commands: each command's
// flags, as its --help lists them, are the ones the scripts offer.
func TestCompletionFlags(t *testing.T) {
	flagLine := regexp.MustCompile(`(?m)^  -(\S+)`)
	for _, c := range bootdCompletion.Commands {
		t.Run(c.Name, func(t *testing.T) {
			help := captureStderr(t, func() error { return commands[c.Name]([]string{"--help"}) })
			var want []string
			for _, m := range flagLine.FindAllStringSubmatch(help, -1) {
				want = append(want, m[1])
			}
			var got []string
			for _, f := range c.Flags {
				got = append(got, f.Name)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("completion offers %q, bootd %s --help lists %q", got, c.Name, want)
			}
		})
	}
	var names []string
	for _, c := range bootdCompletion.Commands {
		names = append(names, c.Name)
	}
	for name := range commands {
		if !slices.Contains(names, name) && !strings.HasPrefix(name, "__") && name != tftpd.WorkerCommand {
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
