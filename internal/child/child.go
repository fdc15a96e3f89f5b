// Package child starts imgbuild's helper programs (dnf, rpm, cp, bwrap, mksquashfs) so that they
// die with imgbuild.
package child

import (
	"context"
	"os/exec"
	"syscall"
)

// Command is exec.CommandContext for a child that is killed when imgbuild dies: a killed build
// must not leave it writing into a build tree that the next build, holding the cache lock, is
// removing (rootfs.CleanStale). Only the child itself is covered; a process it forks is not,
// which CleanStale allows for (in the build sandbox, bwrap takes every process in it along).
func Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}
