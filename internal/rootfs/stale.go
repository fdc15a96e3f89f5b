package rootfs

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Stages lists the layer scratch directories under cacheDir (as Builder.CacheDir): trees being
// built or removed, or what a killed build or removal left.
func Stages(cacheDir string) ([]string, error) {
	return filepath.Glob(filepath.Join(cacheDir, "layers", stagePrefix+"*"))
}

// CleanStale removes what a killed build left at path (a scratch directory or file), after
// unmounting anything still mounted inside it (a build killed while a layer installed leaves its
// /proc and /dev mounts), and returns the apparent size of the files it removed. Callers make
// sure no live build owns it: they hold the cache's lock, or it is too old to be anyone's.
func CleanStale(path string) (bytes int64, err error) {
	if err := unmountUnder(path); err != nil {
		return 0, err
	}
	size := sizeOf(path) // after the unmounts: /proc is not the build's
	if err := removeAll(path); err != nil {
		return 0, fmt.Errorf("remove stale %s: %w", path, err)
	}
	return size, nil
}

// sizeOf is the apparent size of the regular files at or under path, for the log: what cannot be
// read counts as nothing. It walks the tree once more than the removal does; that is on the rare
// path of a killed build, and tells the admin what the cleanup gave back.
func sizeOf(path string) int64 {
	var n int64
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// removeAll removes dir, trying again for a moment when files appear while it does (a directory
// found not empty): the killed build's children die with it (Pdeathsig), but a grandchild (an rpm
// scriptlet) may still be finishing a write. Other errors (permission, a read-only file system)
// do not pass with time, and return at once.
func removeAll(dir string) error {
	var err error
	for range 20 {
		if err = os.RemoveAll(dir); err == nil || !errors.Is(err, unix.ENOTEMPTY) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// unmountUnder detaches every mount point at or below dir, deepest first.
func unmountUnder(dir string) error {
	points, err := mountPoints()
	if err != nil {
		return err
	}
	var under []string
	for _, p := range points {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			under = append(under, p)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(under)))
	for _, p := range under {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount stale %s: %w", p, err)
		}
	}
	return nil
}

// mountPoints lists this mount namespace's mount points (field 5 of /proc/self/mountinfo).
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			points = append(points, unescapeMount(fields[4]))
		}
	}
	return points, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}
