package vlab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/inventory"
)

// Bootd is a bootd daemon serving the lab's bridge.
type Bootd struct {
	lab       *Lab
	Bin       string // the bootd binary
	StateDir  string
	ImagesDir string
	Proc      *Process
}

// StartBootd runs `bootd serve` on the lab's bridge with its state and images under dir, and
// waits until its HTTP answers.
func (l *Lab) StartBootd(ctx context.Context, bin, dir string, extra ...string) (*Bootd, error) {
	b := &Bootd{lab: l, Bin: bin, StateDir: filepath.Join(dir, "state"), ImagesDir: filepath.Join(dir, "images")}
	args := append([]string{"serve", "--interface", l.Bridge, "--state-dir", b.StateDir, "--images", b.ImagesDir}, extra...)
	p, err := l.Start(ctx, filepath.Join(dir, "bootd.log"), bin, args...)
	if err != nil {
		return nil, err
	}
	b.Proc = p
	return b, b.waitHealthy(ctx)
}

// waitHealthy polls /healthz from inside the lab (the only place bootd answers), bounded by ctx.
func (b *Bootd) waitHealthy(ctx context.Context) error {
	url := "http://" + b.lab.Addr.Addr().String() + "/healthz"
	for i := 0; i < 100; i++ {
		if b.Proc.Exited() {
			return fmt.Errorf("bootd exited: %s", TailFile(b.Proc.LogPath, 20))
		}
		if out, err := b.lab.Command(ctx, "wget", "-q", "-O", "-", url).Output(); err == nil && strings.TrimSpace(string(out)) == "ok" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("bootd did not answer %s: %s", url, TailFile(b.Proc.LogPath, 20))
}

// CLI runs a bootd client command against this daemon and returns its combined output.
func (b *Bootd) CLI(ctx context.Context, args ...string) (string, error) {
	out, err := b.Command(ctx, args...).CombinedOutput()
	return string(out), err
}

// CLIInput is CLI with stdin as the command's standard input (bootd power password reads it).
func (b *Bootd) CLIInput(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := b.Command(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Command is a bootd client command against this daemon, for a caller that wants its standard
// output and error apart.
func (b *Bootd) Command(ctx context.Context, args ...string) *exec.Cmd {
	return b.lab.Command(ctx, b.Bin, append(args, "--state-dir", b.StateDir)...)
}

// Nodes is `bootd nodes --json`.
func (b *Bootd) Nodes(ctx context.Context) (ctl.NodesReply, error) {
	var r ctl.NodesReply
	out, err := b.lab.Command(ctx, b.Bin, "nodes", "--json", "--state-dir", b.StateDir).Output()
	if err != nil {
		return r, fmt.Errorf("bootd nodes: %w", err)
	}
	return r, json.Unmarshal(out, &r)
}

// WaitWaiting polls `bootd nodes` until every MAC in macs is listed as waiting.
func (b *Bootd) WaitWaiting(ctx context.Context, macs ...string) error {
	for {
		r, err := b.Nodes(ctx)
		if err == nil && slices.IndexFunc(macs, func(m string) bool {
			return !slices.ContainsFunc(r.Waiting, func(w inventory.Machine) bool { return w.MAC == m })
		}) < 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("machines %s never appeared waiting in bootd nodes: %w", strings.Join(macs, ", "), ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// LogTail is the end of bootd's log, for failure messages.
func (b *Bootd) LogTail(n int) string { return TailFile(b.Proc.LogPath, n) }

// WriteTestImages builds the test image once, with its hardware reporter (its machines become
// ready: BuildReportingTestImage), and publishes it as version 1 of each named image (e.g.
// "master", "compute") under imagesDir, in the artifact format bootd serves.
func WriteTestImages(imagesDir, stageDir, cmdline string, names ...string) error {
	release, err := BuildReportingTestImage(stageDir)
	if err != nil {
		return err
	}
	for _, name := range names {
		m := artifact.Manifest{
			Name: name, Version: "1", Created: time.Unix(0, 0).UTC(),
			Kernel: artifact.Kernel{File: "vmlinuz", Release: release}, Initrds: []string{"initramfs.img"},
			Cmdline: cmdline, Layers: []artifact.Layer{{Name: "vlab-test", Digest: "none"}},
		}
		if _, err := artifact.Write(imagesDir, m, stageDir); err != nil {
			return err
		}
	}
	return nil
}

// TailFile returns the last n lines of the file at path (the error's text when it cannot be
// read), for failure messages.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return LastLines(string(b), n)
}
