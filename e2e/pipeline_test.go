//go:build e2e && pipeline

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/imgbuild"
	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
)

// debianMirror is Debian's archive, as this machine's apt reaches it.
const debianMirror = "http://deb.debian.org/debian"

// TestPipelineDebian12 runs ci/pipeline.yml's steps in a fresh Debian 12 root made with
// debootstrap from Debian's archive, as a clean runner would: the tools and Go steps exactly as
// the workflow writes them, then its build step with the stand-in repositories (this machine
// reaches no Rocky mirror): the workflow's command plus --tree and --site, on a tree whose
// images are locked against them. `make ci-pipeline` runs it (several minutes, network to
// Debian's archive and the Go module proxy); it is not part of make check.
func TestPipelineDebian12(t *testing.T) {
	testrepo.NeedTools(t, "debootstrap", "dnf", "mksquashfs")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	dir := artifactDir(t)
	root := filepath.Join(dir, "root")
	start := time.Now()
	sh(ctx, t, "debootstrap", "--variant=minbase", "bookworm", root, debianMirror)
	t.Logf("debootstrap bookworm: %s", time.Since(start).Round(time.Second))
	mountChroot(ctx, t, root)
	// This machine reaches the Go proxy through an egress proxy whose CA the host trusts (in
	// /usr/local/share/ca-certificates, as a runner's admin would put a site CA); the root gets
	// the same trust, which ca-certificates (the tools step) takes in. A hosted runner needs none.
	sh(ctx, t, "sh", "-c", `mkdir -p "$0/usr/local/share/ca-certificates" && for f in /usr/local/share/ca-certificates/*.crt; do [ -e "$f" ] && cp "$f" "$0/usr/local/share/ca-certificates/"; done; true`, root)
	sh(ctx, t, "cp", "/etc/resolv.conf", filepath.Join(root, "etc/resolv.conf"))
	sh(ctx, t, "sh", "-c", `cd .. && git ls-files -z | xargs -0 cp -a --parents -t "$0"`, mkdir(t, filepath.Join(root, "src")))

	steps := workflowSteps(t)
	for _, name := range []string{"tools", "go"} {
		start := time.Now()
		out := inChroot(ctx, t, root, nil, steps[name])
		t.Logf("step %s (%s): %s\n%s", name, steps[name], time.Since(start).Round(time.Second), lastLine(out))
	}

	// The stand-in repositories and the images locked against them, at the same path on the
	// host and in the root, so the site file's file:// URLs hold in both.
	t.Setenv("SOURCE_DATE_EPOCH", testrepo.ImageEpoch)
	tree := mkdir(t, filepath.Join(dir, "tree"))
	site, err := testrepo.StandInTree(ctx, "..", tree, "master", "compute")
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range []string{"master", "compute"} {
		o := imgbuild.Options{SitePath: site.Path, CacheDir: filepath.Join(dir, "lock-cache"), Log: testrepo.QuietLog()}
		if _, _, err := imgbuild.Lock(ctx, filepath.Join(tree, "images", img+".toml"), o); err != nil {
			t.Fatal(err)
		}
	}
	inRoot := mkdir(t, filepath.Join(root, tree))
	sh(ctx, t, "mount", "--bind", tree, inRoot)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", inRoot).Run() })

	start = time.Now()
	build := steps["build twice, compare, publish"] + " --tree " + tree + " --site " + site.Path
	out := inChroot(ctx, t, root, []string{"CI_TAG=images-ci-1"}, build)
	t.Logf("step build (%s): %s\n%s", build, time.Since(start).Round(time.Second), out)
	for _, img := range []string{"master", "compute"} {
		checkImage(ctx, t, filepath.Join(root, "src", "published", img, "ci-1"), nil, nil)
	}
	if rpms, _ := filepath.Glob(filepath.Join(root, "src", "published", "rpms", "*.rpm")); len(rpms) < len(site.Names) {
		t.Errorf("published %d packages, want the %d the images install or more", len(rpms), len(site.Names))
	}
}

// workflowSteps reads ci/pipeline.yml's steps: name -> its one-line run command.
func workflowSteps(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("../ci/pipeline.yml")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s+- name: (.+)\n(?:\s+env:\n(?:\s{10,}.+\n)+)?\s+run: (.+)$`)
	steps := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(data), -1) {
		steps[m[1]] = m[2]
	}
	for _, want := range []string{"tools", "go", "build twice, compare, publish"} {
		if steps[want] == "" || strings.HasPrefix(steps[want], "|") {
			t.Fatalf("ci/pipeline.yml: no one-line run for step %q (found %v)", want, steps)
		}
	}
	return steps
}

// inChroot runs command with bash in /src of root, with a clean environment plus env, and
// returns its output; a failure fails the test.
func inChroot(ctx context.Context, t *testing.T, root string, env []string, command string) string {
	t.Helper()
	args := append([]string{root, "/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "LANG=C.UTF-8", "GOTOOLCHAIN=local"}, env...)
	args = append(args, "bash", "-euo", "pipefail", "-c", "cd /src && "+command)
	out, err := exec.CommandContext(ctx, "chroot", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("in the Debian 12 root: %s: %v\n%s", command, err, out)
	}
	return string(out)
}

// mountChroot mounts /proc, /sys and /dev in root, unmounted when the test ends.
func mountChroot(ctx context.Context, t *testing.T, root string) {
	t.Helper()
	for _, m := range [][]string{{"-t", "proc", "proc", "proc"}, {"-t", "sysfs", "sys", "sys"}, {"--rbind", "/dev", "dev"}} {
		target := filepath.Join(root, m[len(m)-1])
		sh(ctx, t, "mount", append(m[:len(m)-1], target)...)
		t.Cleanup(func() { _ = exec.Command("umount", "-l", target).Run() })
	}
}

func sh(ctx context.Context, t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
