package rootfs

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// Account is a user or group to create with a fixed id before a layer's packages install, so
// that files the packages own get the same ids on every node (munge, slurm).
type Account struct {
	Group   bool
	Name    string
	ID      int
	GID     int // users only
	Home    string
	Shell   string
	Comment string
}

// ensureAccount adds a to the tree's account files, or checks that it is already there with
// the same id. Writing the files directly keeps the build free of the host's useradd. Every file
// is opened through root, the tree: a path that leads out of it (an absolute /etc symlink) is
// refused, and so is an account file that is a symlink itself (accountFile).
func ensureAccount(root *os.Root, a Account) error {
	db, line := "etc/passwd", fmt.Sprintf("%s:x:%d:%d:%s:%s:%s", a.Name, a.ID, a.GID, a.Comment, a.Home, a.Shell)
	shadowDB, shadow := "etc/shadow", a.Name+":!!:0::::::"
	if a.Group {
		db, line, shadowDB, shadow = "etc/group", fmt.Sprintf("%s:x:%d:", a.Name, a.ID), "etc/gshadow", a.Name+":!::"
	}
	existing, err := lookupID(root, db, a.Name)
	if err != nil {
		return err
	}
	switch {
	case existing == a.ID:
		return nil
	case existing >= 0:
		return fmt.Errorf("/%s: %s already exists in the image with id %d, want %d", db, a.Name, existing, a.ID)
	}
	if err := appendLine(root, db, line, 0o644); err != nil {
		return err
	}
	return appendLine(root, shadowDB, shadow, 0o000)
}

// accountFile checks the account file name in root: a regular file or nothing. An earlier layer
// or a package that made it a symlink (to /etc/profile.d/x.sh, say, or to the host's own file)
// gets an error rather than a line appended to whatever the link names.
func accountFile(root *os.Root, name string) (exists bool, err error) {
	fi, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("/%s: %w (account files are written inside the image only)", name, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := root.Readlink(name)
		return false, fmt.Errorf("/%s is a symlink (to %s): account files are written in place, inside the image, never through a link", name, target)
	case !fi.Mode().IsRegular():
		return false, fmt.Errorf("/%s is not a regular file (%s)", name, fi.Mode().Type())
	}
	return true, nil
}

// lookupID returns the id of name in the tree's /etc/passwd or /etc/group (db), or -1.
func lookupID(root *os.Root, db, name string) (int, error) {
	exists, err := accountFile(root, db)
	if err != nil || !exists {
		return -1, err
	}
	f, err := root.Open(db)
	if err != nil {
		return -1, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) > 2 && fields[0] == name {
			id, err := strconv.Atoi(fields[2])
			if err != nil {
				return -1, fmt.Errorf("/%s: %s has id %q, not a number", db, name, fields[2])
			}
			return id, nil
		}
	}
	return -1, sc.Err()
}

// appendLine appends line to the account file name in root, creating it with perm when absent.
func appendLine(root *os.Root, name, line string, perm os.FileMode) error {
	if _, err := accountFile(root, name); err != nil {
		return err
	}
	if err := root.MkdirAll("etc", 0o755); err != nil {
		return fmt.Errorf("/etc: %w", err)
	}
	f, err := root.OpenFile(name, os.O_APPEND|os.O_CREATE|os.O_WRONLY, perm)
	if err != nil {
		return fmt.Errorf("/%s: %w", name, err)
	}
	_, werr := f.WriteString(line + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// resolveOwner turns a user or group name (or number) into an id using the tree's own account
// files (db: "etc/passwd" or "etc/group").
func resolveOwner(root *os.Root, db, name string) (int, error) {
	if name == "" {
		return 0, nil
	}
	if n, err := strconv.Atoi(name); err == nil {
		return n, nil
	}
	id, err := lookupID(root, db, name)
	if err == nil && id < 0 {
		err = fmt.Errorf("no %s %q in the image's /%s", map[string]string{"etc/passwd": "user", "etc/group": "group"}[db], name, db)
	}
	return id, err
}
