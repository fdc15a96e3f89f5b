package vlab

import (
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// initScript is the image's /init; see init.sh for what it prints.
//
//go:embed init.sh
var initScript []byte

// Image sources on the build machine (variables so tests can point at
// fixtures).
var (
	bootDir     = "/boot"
	modulesRoot = "/lib/modules"
	busyboxPath = "/bin/busybox"
)

// BuildTestImage writes stageDir/vmlinuz (the installed Debian kernel) and
// stageDir/initramfs.img (busybox, the NIC modules and an /init that
// configures the network from ip=/BOOTIF=, prints VLAB-* markers on ttyS0
// and powers off). It returns the kernel release used.
func BuildTestImage(stageDir string) (kernelRelease string, err error) {
	return stageImage(stageDir, "initramfs", imageEntries)
}

// stageImage writes stageDir/vmlinuz (the installed kernel findKernel picks) and
// stageDir/initramfs.img holding the entries listed for that release; what names the
// initramfs in errors. It returns the kernel release.
func stageImage(stageDir, what string, entries func(release string) ([]cpioEntry, error)) (string, error) {
	release, err := findKernel(bootDir, modulesRoot, uname())
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(stageDir, 0o755); err != nil {
		return "", fmt.Errorf("vlab: stage dir: %w", err)
	}
	if err := copyFile(filepath.Join(bootDir, "vmlinuz-"+release), filepath.Join(stageDir, "vmlinuz")); err != nil {
		return "", fmt.Errorf("vlab: kernel: %w", err)
	}
	list, err := entries(release)
	if err != nil {
		return "", fmt.Errorf("vlab: %s: %w", what, err)
	}
	var buf bytes.Buffer
	if err := writeInitramfs(&buf, list); err != nil {
		return "", fmt.Errorf("vlab: %s: %w", what, err)
	}
	if err := os.WriteFile(filepath.Join(stageDir, "initramfs.img"), buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("vlab: %s: %w", what, err)
	}
	return release, nil
}

// findKernel picks the kernel release to boot: one with both
// <boot>/vmlinuz-<release> and <modules>/<release>/modules.dep. The running
// kernel is preferred when installed (the build machine may itself run a
// kernel that is not a Debian package), else the highest release.
func findKernel(boot, modules, running string) (string, error) {
	kernels, err := filepath.Glob(filepath.Join(boot, "vmlinuz-*"))
	if err != nil {
		return "", fmt.Errorf("vlab: find kernel: %w", err)
	}
	var releases []string
	for _, k := range kernels {
		rel := strings.TrimPrefix(filepath.Base(k), "vmlinuz-")
		if _, err := os.Stat(filepath.Join(modules, rel, "modules.dep")); err == nil {
			releases = append(releases, rel)
		}
	}
	if len(releases) == 0 {
		return "", fmt.Errorf("vlab: no kernel in %s with modules in %s (install linux-image-amd64)", boot, modules)
	}
	sort.Strings(releases)
	for _, r := range releases {
		if r == running {
			return r, nil
		}
	}
	return releases[len(releases)-1], nil
}

func uname() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// imageEntries lists the initramfs: directory skeleton, /dev/console (the
// kernel opens it for init before devtmpfs is mounted), busybox, the NIC
// modules in load order, the host's curl, and /init.
func imageEntries(release string) ([]cpioEntry, error) {
	entries, err := busyboxEntries()
	if err != nil {
		return nil, err
	}
	mods, err := resolveModules(release, nicModules)
	if err != nil {
		return nil, err
	}
	entries = append(entries, []cpioEntry{
		{Name: "etc/vlab/release", Mode: modeFile | 0o644, Data: []byte(release + "\n")},
		{Name: "etc/vlab/modules", Mode: modeFile | 0o644, Data: []byte(strings.Join(mods, "\n") + "\n")},
		{Name: "init", Mode: modeFile | 0o755, Data: initScript},
	}...)
	modEntries, err := moduleEntries(release, mods)
	if err != nil {
		return nil, err
	}
	// curl says hello from a privileged port, as a node's bootd-node does (bootd knows a node by
	// its address, that port and its MAC); busybox's wget and nc cannot choose their port.
	curl, err := programEntries([]hostFile{{"/usr/bin/curl", "curl"}})
	if err != nil {
		return nil, fmt.Errorf("the host's curl (Debian package curl): %w", err)
	}
	entries = append(append(entries, modEntries...), curl...)
	return withParents(entries, "proc", "sys", "tmp", "sbin", "usr/bin", "usr/sbin"), nil
}

// moduleEntries copies the release's module files (as resolveModules returns them) to
// lib/modules/<release>/ in the image.
func moduleEntries(release string, mods []string) ([]cpioEntry, error) {
	var entries []cpioEntry
	for _, m := range mods {
		data, err := os.ReadFile(filepath.Join(modulesRoot, release, m))
		if err != nil {
			return nil, err
		}
		entries = append(entries, cpioEntry{Name: filepath.Join("lib/modules", release, m), Mode: modeFile | 0o644, Data: data})
	}
	return entries, nil
}

// busyboxEntries are what every test initramfs starts with: busybox as /bin/sh, and
// /dev/console (the kernel opens it for init before devtmpfs is mounted).
func busyboxEntries() ([]cpioEntry, error) {
	busybox, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, err
	}
	return []cpioEntry{
		{Name: "bin/busybox", Mode: modeFile | 0o755, Data: busybox},
		{Name: "bin/sh", Mode: modeSymlink | 0o777, Data: []byte("busybox")},
		{Name: "dev/console", Mode: modeCharDev | 0o600, RMajor: 5, RMinor: 1},
	}, nil
}

// withParents adds the extra directories and every missing parent
// directory of the entries.
func withParents(entries []cpioEntry, extraDirs ...string) []cpioEntry {
	have := map[string]bool{}
	for _, e := range entries {
		have[e.Name] = true
	}
	add := func(dir string) {
		for d := dir; d != "." && d != "/" && !have[d]; d = filepath.Dir(d) {
			have[d] = true
			entries = append(entries, cpioEntry{Name: d, Mode: modeDir | 0o755})
		}
	}
	for _, e := range append([]cpioEntry(nil), entries...) {
		add(filepath.Dir(e.Name))
	}
	for _, d := range extraDirs {
		add(d)
	}
	return entries
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// BuildReportingTestImage is BuildTestImage with /bin/reporter, which the image's /init runs
// after its hello to report the machine's hardware to bootd (so bootd shows it ready). The
// reporter is a static Go program built here (the go command must be on PATH).
func BuildReportingTestImage(stageDir string) (kernelRelease string, err error) {
	if err := os.MkdirAll(stageDir, 0o755); err != nil {
		return "", fmt.Errorf("vlab: stage dir: %w", err)
	}
	bin := filepath.Join(stageDir, ".reporter")
	defer os.Remove(bin)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "github.com/labcluster/gpucluster/internal/testkit/vlab/reporter")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("vlab: build the image's reporter: %w: %s", err, out)
	}
	reporter, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	return stageImage(stageDir, "initramfs", func(release string) ([]cpioEntry, error) {
		entries, err := imageEntries(release)
		if err != nil {
			return nil, err
		}
		return append(entries, cpioEntry{Name: "bin/reporter", Mode: modeFile | 0o755, Data: reporter}), nil
	})
}
