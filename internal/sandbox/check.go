package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Check starts an empty command in a sandbox, so that a host without bubblewrap, or one whose
// kernel or container forbids its namespaces, fails before a build downloads anything rather than
// at its first scriptlet.
func Check(ctx context.Context) error {
	if _, err := exec.LookPath(Program); err != nil {
		return fmt.Errorf("bubblewrap (%s) is not installed: imgbuild runs layer commands and package scriptlets in its sandbox (Debian: apt-get install bubblewrap; Rocky: dnf install bubblewrap)", Program)
	}
	trueBin, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("sandbox check: %w", err)
	}
	tree, err := os.MkdirTemp("", "imgbuild-sandbox-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tree)
	cmd, err := Tool(ctx, tree, Options{}, trueBin)
	if err != nil {
		return err
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("the build sandbox (bubblewrap) does not start on this host: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
