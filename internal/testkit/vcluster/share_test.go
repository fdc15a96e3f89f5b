package vcluster

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The rendered files of the reference lab (overlays/nfs), as the stand-in reads them.
const (
	exportsFile = "# bootd: ...\n/home          10.80.0.0/24(rw,sync,no_subtree_check,root_squash)\n" +
		"/opt/software  10.80.0.0/24(rw,sync,no_subtree_check,root_squash)\n"
	fstabFile = "# bootd: ...\nmaster:/home          /home          nfs  defaults,_netdev  0 0\n" +
		"master:/opt/software  /opt/software  nfs  defaults,_netdev  0 0\n"
)

// TestShares: the master's exports become directories of its own, bound over the exported
// paths; a compute's NFS fstab lines bind those same directories.
func TestShares(t *testing.T) {
	c := &Cluster{}
	master := &Node{Name: "master", Dir: t.TempDir(), cluster: c}
	c.nodes = append(c.nodes, master)
	mb, err := c.shares(master, []File{{Path: "/etc/exports", Data: []byte(exportsFile)}})
	if err != nil {
		t.Fatal(err)
	}
	want := []bindMount{
		{Source: filepath.Join(master.Dir, "exports/home"), Target: "/home"},
		{Source: filepath.Join(master.Dir, "exports/opt/software"), Target: "/opt/software"},
	}
	if !slices.Equal(mb, want) {
		t.Errorf("master's binds %v, want %v", mb, want)
	}
	for _, b := range mb {
		if st, err := os.Stat(b.Source); err != nil || !st.IsDir() {
			t.Errorf("export directory %s: %v", b.Source, err)
		}
	}
	c1 := &Node{Name: "c1", Dir: t.TempDir(), cluster: c}
	cb, err := c.shares(c1, []File{{Path: "/etc/bootd/fstab", Data: []byte(fstabFile + "master:/home/u /mnt/u nfs4 defaults 0 0\n")}})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, bindMount{Source: filepath.Join(master.Dir, "exports/home/u"), Target: "/mnt/u"})
	if !slices.Equal(cb, want) {
		t.Errorf("c1's binds %v, want %v", cb, want)
	}
	for _, tt := range []struct{ name, fstab, want string }{
		{"unknown server", "other:/home /home nfs defaults 0 0\n", errNotExported.Error()},
		{"path not exported", "master:/srv /srv nfs defaults 0 0\n", errNotExported.Error()},
		{"not nfs", "/dev/sda1 /data ext4 defaults 0 0\n", "NFS mounts only"},
		{"no path", "master /home nfs defaults 0 0\n", "not server:/path"},
		{"short line", "master:/home /home\n", "at least"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.shares(c1, []File{{Path: "/etc/bootd/fstab", Data: []byte(tt.fstab)}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("shares: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := c.exported("master", "/srv"); !errors.Is(err, errNotExported) {
		t.Errorf("exported(master, /srv): %v, want errNotExported", err)
	}
}

func TestParseTmpfiles(t *testing.T) {
	got, err := parseTmpfiles([]byte("# c\nd /home 0755 root root -\nd /var/spool/slurmctld 0700 slurm slurm -\nd /scratch 1777\nd /x\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []tmpfilesDir{
		{Path: "/home", Mode: 0o755, User: "root", Group: "root"},
		{Path: "/var/spool/slurmctld", Mode: 0o700, User: "slurm", Group: "slurm"},
		{Path: "/scratch", Mode: 0o777 | fs.ModeSticky, User: "root", Group: "root"},
		{Path: "/x", Mode: 0o755, User: "root", Group: "root"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseTmpfiles = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"L /etc/x - - - - /y\n", "d relative 0755\n", "d /x 0999\n", "d\n"} {
		if _, err := parseTmpfiles([]byte(bad)); err == nil {
			t.Errorf("parseTmpfiles(%q) accepted", bad)
		}
	}
}

// TestStageShares: a bind on a top-level directory needs no overlay, one below gets its mount
// point in an overlay's upper layer; tmpfiles.d directories on a bind wait for init (they land
// in the shared directory), the others are staged like files.
func TestStageShares(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to chown, as CI has")
	}
	host := t.TempDir()
	for _, d := range []string{"etc", "var/lib", "home", "opt"} {
		must(t, os.MkdirAll(filepath.Join(host, d), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(host, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(host, "etc/group"), []byte("root:x:0:\n"), 0o644))
	tmpfiles := "d /home 0755 root root -\nd /opt/software/modules/all 0755 root root -\nd /var/spool/slurmctld 0700 slurm slurm -\n"
	files := []File{{Path: "/etc/tmpfiles.d/bootd.conf", Mode: 0o644, Data: []byte(tmpfiles)}}
	binds := []bindMount{{Source: "/srv/exports/home", Target: "/home"}, {Source: "/srv/exports/opt/software", Target: "/opt/software"}}
	dir := t.TempDir()
	s, err := stage(host, dir, "master", []Account{{Name: "slurm", UID: 901, GID: 901}}, files, binds)
	if err != nil {
		t.Fatal(err)
	}
	var targets, late []string
	for _, o := range s.Overlays {
		targets = append(targets, o.Target)
	}
	for _, f := range s.Late {
		late = append(late, f.Path)
	}
	if want := []string{"/etc", "/opt", "/var"}; !slices.Equal(targets, want) {
		t.Errorf("overlays %q, want %q", targets, want)
	}
	if want := []string{"/home", "/opt/software/modules/all"}; !slices.Equal(late, want) {
		t.Errorf("late %q, want %q", late, want)
	}
	if !slices.Equal(s.Binds, binds) {
		t.Errorf("binds %v, want %v", s.Binds, binds)
	}
	if st, err := os.Stat(filepath.Join(dir, "upper/opt/software")); err != nil || !st.IsDir() {
		t.Errorf("mount point /opt/software: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, "upper/var/spool/slurmctld")); err != nil || st.Mode() != fs.ModeDir|0o700 {
		t.Errorf("tmpfiles /var/spool/slurmctld: %v %v", st, err)
	} else if uid, gid := owner(st); uid != 901 || gid != 901 {
		t.Errorf("tmpfiles /var/spool/slurmctld owned %d:%d, want 901:901", uid, gid)
	}
	for _, b := range [][]bindMount{
		{{Source: "/s", Target: "/tmp/x"}},
		{{Source: "/s", Target: "/nonexistent"}},
		{{Source: "s", Target: "/home"}},
		{{Source: "/s", Target: "/proc/x"}},
		{{Source: "/s", Target: "/opt/a"}, {Source: "/t", Target: "/opt/a/b"}},
	} {
		if _, err := stage(host, t.TempDir(), "master", nil, nil, b); err == nil {
			t.Errorf("binds %v accepted", b)
		}
	}
	bad := []File{{Path: "/etc/tmpfiles.d/x.conf", Data: []byte("d /var/x 0755 nosuchuser root -\n")}}
	if _, err := stage(host, t.TempDir(), "master", nil, bad, nil); err == nil || !strings.Contains(err.Error(), "nosuchuser") {
		t.Errorf("tmpfiles line with an unknown user: %v", err)
	}
}
