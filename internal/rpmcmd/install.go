package rpmcmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/sirupsen/logrus"
)

// InstallOptions tunes InstallFiles.
type InstallOptions struct {
	// WorkDir holds the generated rpm macros; a temporary directory when
	// empty. Must not be inside the root.
	WorkDir string
	// SourceDateEpoch becomes the packages' install time in the database.
	SourceDateEpoch int64
	Log             logrus.FieldLogger
}

// InstallFiles installs exactly the given RPM files into root in one rpm
// transaction, and nothing else:
//
//	rpm --root=<root> --dbpath=/var/lib/rpm --force-debian --noplugins \
//	    --nosignature -i <files sorted by NEVRA>
//
// rpm rather than dnf: dnf given local files would still consult repo
// metadata and history, and may pull in or upgrade other packages; rpm -i
// installs the set or fails, checks the dependencies against what the root
// already has (a layer must be complete on top of its parents), refuses to
// replace an installed package, and runs the scriptlets chrooted into root.
//
// rpm runs in the build sandbox (internal/sandbox), and so do the
// scriptlets it starts: the host's /usr and the package files read-only,
// root writable with the sandbox's own /proc and /dev in it, no network.
// The files are ordered by NEVRA from their headers, not by path, so the
// transaction (and so the database) does not depend on where the caller
// keeps them; rpm then orders by dependencies with that as the tie-break.
//
// Signatures are not checked here (--nosignature): dnf checked them when
// the set was locked and each file's sha256 is checked against the lock
// before it gets here, while the image's database has no keys yet and would
// only print NOKEY. Digests are still verified.
func InstallFiles(ctx context.Context, root string, rpmFiles []string, opt InstallOptions) error {
	if len(rpmFiles) == 0 {
		return nil
	}
	if !filepath.IsAbs(root) || filepath.Clean(root) == "/" {
		return fmt.Errorf("image root %q: must be an absolute path other than /", root)
	}
	home, cleanup, err := macrosHome(opt.WorkDir, root)
	if err != nil {
		return err
	}
	defer cleanup()
	for _, d := range []string{root, filepath.Join(root, "proc"), filepath.Join(root, "dev")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	log := opt.Log
	if log == nil {
		log = (&Env{}).log()
	}
	env := environ(home, opt.SourceDateEpoch)
	abs, err := absPaths(rpmFiles)
	if err != nil {
		return err
	}
	ordered, err := orderByNEVRA(ctx, abs)
	if err != nil {
		return err
	}
	args := append(rootArgs(root), "--force-debian", "--noplugins", "--nosignature", "-i")
	readOnly := append(parentDirs(ordered), home)
	if _, err := runSandboxed(ctx, log, root, readOnly, "rpm", append(args, ordered...), env); err != nil {
		return fmt.Errorf("install %d packages into %s: %w", len(ordered), root, err)
	}
	return dropSQLiteSidecars(filepath.Join(root, DBPath))
}

// absPaths makes files absolute: the sandbox binds them where they are.
func absPaths(files []string) ([]string, error) {
	out := make([]string, len(files))
	for i, f := range files {
		a, err := filepath.Abs(f)
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return out, nil
}

// parentDirs are the directories holding files, each once: what the sandbox shows rpm read-only.
func parentDirs(files []string) []string {
	var dirs []string
	for _, f := range files {
		if d := filepath.Dir(f); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// dropSQLiteSidecars removes rpmdb.sqlite-wal and -shm when the log is
// empty (rpm checkpoints on close): the -shm index holds per-run bytes
// that would make two identical installs differ, and sqlite rebuilds it on
// the next open. A non-empty log is left alone: it holds data.
func dropSQLiteSidecars(dbDir string) error {
	wal := filepath.Join(dbDir, "rpmdb.sqlite-wal")
	st, err := os.Stat(wal)
	if err != nil || st.Size() != 0 {
		return nil
	}
	for _, p := range []string{wal, filepath.Join(dbDir, "rpmdb.sqlite-shm")} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("clean rpm database: %w", err)
		}
	}
	return nil
}

// macrosHome returns a HOME with the image's rpm macros.
func macrosHome(workDir, root string) (string, func(), error) {
	if workDir == "" {
		d, err := os.MkdirTemp("", "rpmcmd-")
		if err != nil {
			return "", nil, fmt.Errorf("temp dir: %w", err)
		}
		workDir = d
		home := filepath.Join(d, "home")
		return home, func() { os.RemoveAll(d) }, writeMacros(home)
	}
	if within(workDir, root) {
		return "", nil, fmt.Errorf("work dir %s is inside the image root %s", workDir, root)
	}
	home := filepath.Join(workDir, "home")
	return home, func() {}, writeMacros(home)
}

// orderByNEVRA returns the files sorted by the NEVRA in their headers.
// Two files with the same NEVRA are an error: rpm would refuse them anyway,
// with a less helpful message.
func orderByNEVRA(ctx context.Context, files []string) ([]string, error) {
	hs, err := ReadHeaders(ctx, files)
	if err != nil {
		return nil, err
	}
	byNEVRA := make(map[string]string, len(files))
	nevras := make([]string, len(files))
	for i, h := range hs {
		n := h.NEVRA()
		if prev, dup := byNEVRA[n]; dup {
			return nil, fmt.Errorf("package %s given twice: %s and %s", n, prev, files[i])
		}
		byNEVRA[n] = files[i]
		nevras[i] = n
	}
	sort.Strings(nevras)
	ordered := make([]string, len(nevras))
	for i, n := range nevras {
		ordered[i] = byNEVRA[n]
	}
	return ordered, nil
}
