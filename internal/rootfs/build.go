package rootfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/logfield"
	"github.com/labcluster/gpucluster/internal/sandbox"
	"github.com/labcluster/gpucluster/internal/spec"
)

// Step is one layer to apply: its definition (role already applied) and its locked RPMs.
type Step struct {
	Layer *spec.Layer
	RPMs  []string // cached RPM files, hashes checked, in lock order
	// RPMDigests are the locked sha256 of RPMs: with the layer's own digest and its parent's key
	// they make the layer's cache key.
	RPMDigests []string
}

// Result reports what happened to one layer.
type Result struct {
	Layer    string
	Key      string
	Cached   bool
	Duration time.Duration
}

// Builder applies steps with a layer cache under CacheDir. Its callers hold the cache (no other
// build uses CacheDir at the same time) and clear what killed builds left first (Stages,
// CleanStale).
type Builder struct {
	CacheDir string
	// Install installs exactly the given RPM files into root.
	Install func(ctx context.Context, root string, rpms []string) error
	Epoch   int64 // SOURCE_DATE_EPOCH for commands run inside the image
	Log     logrus.FieldLogger
}

// Build applies steps in order and returns what happened to each layer. Layers whose key is
// cached are reused; the others are built over the layers below them (overlay.go), and stored
// as what they add. Mount shows the result.
func (b *Builder) Build(ctx context.Context, steps []Step) ([]Result, error) {
	// The host's umask must not reach the image: the tree's root, the parents of layer files,
	// the account files and what commands create would get 0750 dirs under umask 027 on one
	// host and 0755 on another. Set here, where trees are made, every caller gets the same
	// trees; the umask is the process's, so the caller's comes back after the build.
	defer syscall.Umask(syscall.Umask(0o022))
	if len(steps) == 0 {
		return nil, errors.New("no layers to build")
	}
	results := make([]Result, 0, len(steps))
	var below []string // keys of the layers below, bottom first
	for _, st := range steps {
		start := time.Now()
		key := b.layerKey(lastKey(below), st)
		dir := b.layerDir(key)
		cached := exists(dir)
		if !cached {
			if err := b.buildLayer(ctx, st, below, dir); err != nil {
				return results, fmt.Errorf("layer %s: %w", st.Layer.Name, err)
			}
		}
		r := Result{Layer: st.Layer.Name, Key: key, Cached: cached, Duration: time.Since(start)}
		b.Log.WithFields(logrus.Fields{"layer": r.Layer, "cached": r.Cached, "duration": logfield.Duration(r.Duration), "key": key[:12]}).Info("layer ready")
		results = append(results, r)
		below = append(below, key)
	}
	return results, nil
}

// Cached reports whether every layer of steps is in the cache: Build then needs none of their
// packages, and a caller may leave Step.RPMs empty.
func (b *Builder) Cached(steps []Step) bool {
	key := ""
	for _, st := range steps {
		key = b.layerKey(key, st)
		if !exists(b.layerDir(key)) {
			return false
		}
	}
	return len(steps) > 0
}

func lastKey(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	return keys[len(keys)-1]
}

// keyFormat names the way this builder makes trees. Change it whenever the builder changes what
// a tree holds, so that trees an older builder left in the cache are not taken for this one's.
const keyFormat = "rootfs/5"

// layerKey is sha256 over the builder's format, the parent's key, the layer definition's digest
// (which covers its input files), the epoch (rpm's install times, the commands'
// SOURCE_DATE_EPOCH) and the locked packages: any change to one of them changes this layer's key
// and, through the parent key, every key above it.
func (b *Builder) layerKey(parentKey string, st Step) string {
	h := sha256.New()
	fmt.Fprintf(h, "format %s\nparent %s\nlayer %s\nepoch %d\n", keyFormat, parentKey, st.Layer.Digest, b.Epoch)
	for _, d := range st.RPMDigests {
		fmt.Fprintf(h, "rpm %s\n", d)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// buildLayer builds into a temporary directory and renames it into the cache when complete, so
// a killed build never leaves a half layer that a later build would take for finished. Over
// layers below, the layer is applied through an overlayfs mount of them and what lands in its
// upper directory is the layer; the first layer is a plain tree.
func (b *Builder) buildLayer(ctx context.Context, st Step, below []string, dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	stage, err := os.MkdirTemp(filepath.Dir(dir), stagePrefix+st.Layer.Name+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	diff := filepath.Join(stage, "diff")
	if len(below) == 0 {
		err = os.Mkdir(diff, 0o755)
		if err == nil {
			err = b.apply(ctx, st, diff)
		}
	} else {
		err = b.applyOver(ctx, st, below, stage)
	}
	if err != nil {
		return err
	}
	// The cache entry is the diff itself: rename the finished diff into place, durably
	// (durable.go).
	if err := syncFS(stage); err != nil {
		return err
	}
	if err := rename(diff, dir); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// applyOver applies the layer through an overlayfs mount of the layers below (keys, bottom
// first) with stage/diff as the upper directory. The builder mounts it (in its own namespace, at
// the stage, which no image holds), not the sandbox: the builder itself writes accounts, files
// and services into the merged tree and links up aliases after the commands, the mount takes
// options bubblewrap's --overlay cannot give (index=on, redirect_dir=on: overlay.go), and the
// sandboxed commands get it as their / with their own /proc and /dev over it, in their own mount
// namespace, so nothing more is mounted where the host sees it.
func (b *Builder) applyOver(ctx context.Context, st Step, below []string, stage string) error {
	diff, merged := filepath.Join(stage, "diff"), filepath.Join(stage, "merged")
	lowers := b.lowerDirs(below)
	if err := mountOverlay(lowers, lowers[0], diff, filepath.Join(stage, "work"), merged, layerOptions); err != nil {
		return err
	}
	err := b.apply(ctx, st, merged)
	if err == nil {
		err = linkUpAliases(diff, merged)
	}
	return errors.Join(err, unmount(merged))
}

// apply adds one layer to tree: accounts first (fixed ids before packages create files), then
// packages, files, services and commands. Package scriptlets (Install) and commands run in the
// build sandbox (internal/sandbox), which mounts its own /proc and /dev over the tree's, in its
// own mount namespace: nothing is mounted in the tree as the host sees it.
func (b *Builder) apply(ctx context.Context, st Step, tree string) error {
	l := st.Layer
	if err := ensureAccounts(tree, l); err != nil {
		return fmt.Errorf("users and groups: %w", err)
	}
	if err := apiDirs(tree); err != nil {
		return err
	}
	if len(st.RPMs) > 0 {
		b.Log.WithFields(logrus.Fields{"layer": l.Name, "packages": len(st.RPMs)}).Info("installing packages")
		if err := b.Install(ctx, tree, st.RPMs); err != nil {
			return fmt.Errorf("install packages: %w", err)
		}
	}
	if err := writeFiles(tree, l.Files); err != nil {
		return fmt.Errorf("files: %w", err)
	}
	if err := setServices(ctx, tree, l.Services); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	return b.run(ctx, tree, l)
}

func ensureAccounts(tree string, l *spec.Layer) error {
	root, err := os.OpenRoot(tree)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, g := range l.Groups {
		if err := ensureAccount(root, Account{Group: true, Name: g.Name, ID: g.GID}); err != nil {
			return err
		}
	}
	for _, u := range l.Users {
		a := Account{Name: u.Name, ID: u.UID, GID: u.GID, Home: u.Home, Shell: u.Shell, Comment: u.Comment}
		if err := ensureAccount(root, a); err != nil {
			return err
		}
	}
	return nil
}

// apiDirs makes the mount points of the sandbox's /proc and /dev, as empty directories, where the
// tree has none yet (the first layer's, before its filesystem package): bubblewrap would make
// them itself, but here they are made the same way whatever runs first.
func apiDirs(tree string) error {
	for _, d := range []string{"proc", "dev"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// run executes the layer's commands inside the image, in order, with a fixed environment, each in
// the build sandbox with the tree as its root.
func (b *Builder) run(ctx context.Context, tree string, l *spec.Layer) error {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C",
		fmt.Sprintf("SOURCE_DATE_EPOCH=%d", b.Epoch)}
	for i, c := range l.Run {
		cmd, err := sandbox.Image(ctx, tree, sandbox.Options{Network: c.Network, Env: env}, "/bin/sh", "-c", c.Command)
		if err != nil {
			return err
		}
		b.Log.WithFields(logrus.Fields{"layer": l.Name, "command": c.Description, "network": c.Network}).Info("running command in the image")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("run[%d] %q: %w, in the build sandbox (%s)\n%s", i, c.Command, err, sandboxLimits(c.Network), tail(out, 20))
		}
	}
	return nil
}

// sandboxLimits reminds whoever reads a failed command's error what the sandbox does not allow,
// for a command that failed because of it.
func sandboxLimits(network bool) string {
	s := "no mounts, no host name change, read-only /proc, no /sys, private /dev"
	if !network {
		s += ", no network unless the command sets network = true"
	}
	return s + ": docs/IMGBUILD.md, Build sandbox"
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

func tail(b []byte, n int) string {
	lines := strings.Split(string(bytes.TrimRight(b, "\n")), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
