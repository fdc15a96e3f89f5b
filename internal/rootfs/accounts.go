package rootfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
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
// the same id. Writing the files directly keeps the build free of the host's useradd.
func ensureAccount(tree string, a Account) error {
	db, line := "passwd", fmt.Sprintf("%s:x:%d:%d:%s:%s:%s", a.Name, a.ID, a.GID, a.Comment, a.Home, a.Shell)
	shadow := a.Name + ":!!:0::::::"
	if a.Group {
		db, line, shadow = "group", fmt.Sprintf("%s:x:%d:", a.Name, a.ID), a.Name+":!::"
	}
	existing, err := lookupID(filepath.Join(tree, "etc", db), a.Name)
	if err != nil {
		return err
	}
	switch {
	case existing == a.ID:
		return nil
	case existing >= 0:
		return fmt.Errorf("%s %s already exists in the image with id %d, want %d", db, a.Name, existing, a.ID)
	}
	if err := appendLine(filepath.Join(tree, "etc", db), line, 0o644); err != nil {
		return err
	}
	return appendLine(filepath.Join(tree, "etc", map[bool]string{false: "shadow", true: "gshadow"}[a.Group]), shadow, 0o000)
}

// lookupID returns the id of name in an /etc/passwd or /etc/group file, or -1.
func lookupID(path, name string) (int, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return -1, nil
	}
	if err != nil {
		return -1, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) > 2 && f[0] == name {
			return strconv.Atoi(f[2])
		}
	}
	return -1, sc.Err()
}

func appendLine(path, line string, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(line + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// resolveOwner turns a user or group name (or number) into an id using the tree's own files.
func resolveOwner(tree, db, name string) (int, error) {
	if name == "" {
		return 0, nil
	}
	if n, err := strconv.Atoi(name); err == nil {
		return n, nil
	}
	id, err := lookupID(filepath.Join(tree, "etc", db), name)
	if err == nil && id < 0 {
		err = fmt.Errorf("no %s %q in the image's /etc/%s", map[string]string{"passwd": "user", "group": "group"}[db], name, db)
	}
	return id, err
}
