package vcluster

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// tmpfilesDir is one "d" line of a tmpfiles.d(5) file: a directory systemd-tmpfiles creates
// (or fixes the mode and owner of) at boot.
type tmpfilesDir struct {
	Path        string
	Mode        fs.FileMode
	User, Group string
}

// tmpfilesConf returns the "d" lines of the node's /etc/tmpfiles.d/*.conf files, which the
// harness applies as systemd-tmpfiles-setup.service does at boot: the master's shared module
// tree and the daemons' state directories come from them. Any other line type is an error
// rather than silently skipped, so a template that starts to rely on one fails here.
func tmpfilesConf(files []File) ([]tmpfilesDir, error) {
	var dirs []tmpfilesDir
	for _, f := range files {
		if ok, _ := path.Match("/etc/tmpfiles.d/*.conf", path.Clean(f.Path)); !ok {
			continue
		}
		d, err := parseTmpfiles(f.Data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		dirs = append(dirs, d...)
	}
	return dirs, nil
}

// parseTmpfiles reads "d path mode user group [age]" lines; "-" is the default (0755, root).
func parseTmpfiles(data []byte) ([]tmpfilesDir, error) {
	var dirs []tmpfilesDir
	for i, line := range contentLines(data) {
		f := strings.Fields(line)
		if f[0] != "d" {
			return nil, fmt.Errorf("line %d: type %q: the harness applies \"d\" lines only", i+1, f[0])
		}
		if len(f) < 2 || !path.IsAbs(f[1]) {
			return nil, fmt.Errorf("line %d: want an absolute path: %q", i+1, line)
		}
		f = append(f, "-", "-", "-") // missing fields are defaults
		d := tmpfilesDir{Path: path.Clean(f[1]), Mode: 0o755, User: orDefault(f[3], "root"), Group: orDefault(f[4], "root")}
		if f[2] != "-" {
			m, err := strconv.ParseUint(f[2], 8, 32)
			if err != nil || m > 0o7777 {
				return nil, fmt.Errorf("line %d: mode %q is not octal", i+1, f[2])
			}
			d.Mode = fs.FileMode(m & 0o777)
			if m&0o1000 != 0 {
				d.Mode |= fs.ModeSticky
			}
			if m&0o2000 != 0 {
				d.Mode |= fs.ModeSetgid
			}
		}
		dirs = append(dirs, d)
	}
	return dirs, nil
}

func orDefault(field, def string) string {
	if field == "-" {
		return def
	}
	return field
}

// file resolves the directory's owner and group by the node's accounts.
func (d tmpfilesDir) file(ids map[string][2]int, groups map[string]int) (File, error) {
	uid, ok := ids[d.User]
	if !ok {
		return File{}, fmt.Errorf("tmpfiles: %s: no user %q on the node", d.Path, d.User)
	}
	gid, ok := groups[d.Group]
	if !ok {
		return File{}, fmt.Errorf("tmpfiles: %s: no group %q on the node", d.Path, d.Group)
	}
	return File{Path: d.Path, Mode: fs.ModeDir | d.Mode, UID: uid[0], GID: gid}, nil
}
