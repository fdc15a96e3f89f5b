package rpmcmd

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/child"
	"github.com/labcluster/gpucluster/internal/sandbox"
)

// tailLines is how much of a failed command's standard error an error
// carries: dnf puts the reason in the last few lines.
const tailLines = 15

// hostPath finds dnf, rpm and their helpers on a Debian host. The same list
// is what scriptlets see after rpm chroots into the image.
const hostPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// environ is the whole environment of a command: nothing from the caller's
// environment leaks in (no locale, no DNF_VAR_*, no RPM_* settings).
func environ(home string, sourceDateEpoch int64) []string {
	env := []string{
		"PATH=" + hostPath,
		"HOME=" + home,
		"LANG=C",
		"LC_ALL=C",
		"TZ=UTC",
	}
	if sourceDateEpoch != 0 {
		env = append(env, "SOURCE_DATE_EPOCH="+strconv.FormatInt(sourceDateEpoch, 10))
	}
	return env
}

// run runs one command and returns its standard output. Standard error goes
// to the debug log and, on failure, its tail into the error.
func run(ctx context.Context, log logrus.FieldLogger, name string, args, env []string) ([]byte, error) {
	cmd := child.Command(ctx, name, args...) // dnf and rpm die with imgbuild
	cmd.Env = env
	return output(ctx, log, cmd.Run, cmd, name, args)
}

// runSandboxed is run for a command that changes root and runs package
// scriptlets: in the build sandbox, with readOnly the host paths it reads.
func runSandboxed(ctx context.Context, log logrus.FieldLogger, root string, readOnly []string, name string, args, env []string) ([]byte, error) {
	prog, err := exec.LookPath(name)
	if err != nil {
		return nil, err
	}
	if prog, err = filepath.Abs(prog); err != nil {
		return nil, err
	}
	cmd, err := sandbox.Tool(ctx, root, sandbox.Options{ReadOnly: readOnly, Env: env}, append([]string{prog}, args...)...)
	if err != nil {
		return nil, err
	}
	return output(ctx, log, cmd.Run, cmd.Cmd, name, args)
}

// output runs cmd through run (its own Run, or the sandbox's) and returns its standard output.
func output(ctx context.Context, log logrus.FieldLogger, run func() error, cmd *exec.Cmd, name string, args []string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	log.WithField("cmd", name+" "+strings.Join(args, " ")).Debug("run")
	err := run()
	if s := strings.TrimSpace(stderr.String()); s != "" {
		log.WithField("cmd", name).Debug(s)
	}
	if err != nil {
		if ctx.Err() != nil {
			return stdout.Bytes(), fmt.Errorf("%s: %w", name, ctx.Err())
		}
		return stdout.Bytes(), &CmdError{Cmd: name, Args: args, Err: err, Stderr: Tail(stderr.String(), tailLines)}
	}
	return stdout.Bytes(), nil
}

// CmdError is a failed dnf or rpm run.
type CmdError struct {
	Cmd    string
	Args   []string
	Err    error
	Stderr string // the last lines of standard error
}

func (e *CmdError) Error() string {
	msg := fmt.Sprintf("%s %s: %v", e.Cmd, firstArg(e.Args), e.Err)
	if e.Stderr != "" {
		msg += ":\n" + e.Stderr
	}
	return msg
}

func (e *CmdError) Unwrap() error { return e.Err }

// firstArg names the subcommand in an error: the first argument that is not
// an option, so the message says "dnf install" rather than the whole line.
func firstArg(args []string) string {
	for i, a := range args {
		if a == "-c" {
			continue
		}
		if i > 0 && args[i-1] == "-c" {
			continue
		}
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return strings.Join(args, " ")
}

// Tail returns the last n non-empty lines of s.
func Tail(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, strings.TrimRight(l, " \r"))
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
