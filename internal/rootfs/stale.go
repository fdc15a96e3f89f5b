package rootfs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CleanStale removes what killed builds left under dir: scratch directories whose names start
// with prefix, after unmounting anything still mounted inside them (a build killed while a
// layer installed leaves its /proc and /dev mounts). Callers hold the cache's lock, so no live
// build owns them.
func CleanStale(dir, prefix string) error {
	stale, err := filepath.Glob(filepath.Join(dir, prefix+"*"))
	if err != nil || len(stale) == 0 {
		return err
	}
	for _, s := range stale {
		if err := unmountUnder(s); err != nil {
			return err
		}
		if err := removeAll(s); err != nil {
			return fmt.Errorf("remove stale %s: %w", s, err)
		}
	}
	return nil
}

// removeAll removes dir, trying again for a moment when files appear while it does: the killed
// build's children die with it (Pdeathsig), but a grandchild (an rpm scriptlet) may still be
// finishing a write.
func removeAll(dir string) error {
	var err error
	for range 20 {
		if err = os.RemoveAll(dir); err == nil {
			return nil
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
