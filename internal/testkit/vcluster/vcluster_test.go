package vcluster

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestSysconfig(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{
			name: "slurmd dynamic node",
			file: "# rendered\nSLURMD_OPTIONS=\"--conf-server master -Z --conf 'CPUs=2 RealMemory=1000'\"\n",
			want: []string{"--conf-server", "master", "-Z", "--conf", "CPUs=2 RealMemory=1000"},
		},
		{
			name: "escaped double quotes",
			file: `SLURMD_OPTIONS="--conf \"Gres=gpu:2 CPUs=8\""`,
			want: []string{"--conf", "Gres=gpu:2 CPUs=8"},
		},
		{name: "single-quoted value", file: "SLURMD_OPTIONS='--conf-server master'", want: []string{"--conf-server", "master"}},
		{name: "empty", file: "SLURMD_OPTIONS=\n", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, err := parseEnvFile([]byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := splitWords(env["SLURMD_OPTIONS"])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := splitWords(`--conf "CPUs=2`); err == nil {
		t.Error("unterminated quote accepted")
	}
	if _, err := parseEnvFile([]byte("no equals sign\n")); err == nil {
		t.Error("line without = accepted")
	}
}

func TestMergeAccounts(t *testing.T) {
	passwd := "root:x:0:0:root:/root:/bin/bash\nmunge:x:103:111::/nonexistent:/usr/sbin/nologin\nold:x:900:900::/:/bin/sh\n"
	group := "root:x:0:\nmunge:x:111:\n"
	pw, gr := mergeAccounts([]byte(passwd), []byte(group), []Account{{Name: "munge", UID: 900, GID: 900, Home: "/run/munge"}})
	wantPW := "root:x:0:0:root:/root:/bin/bash\nmunge:x:900:900:munge:/run/munge:/usr/sbin/nologin\n"
	if string(pw) != wantPW {
		t.Errorf("passwd:\n%s\nwant:\n%s", pw, wantPW)
	}
	if want := "root:x:0:\nmunge:x:900:\n"; string(gr) != want {
		t.Errorf("group:\n%s\nwant:\n%s", gr, want)
	}
}

func TestRootOf(t *testing.T) {
	for p, want := range map[string]string{"/etc/hosts": "/etc", "/var/spool/x": "/var", "/run/munge": "/run", "/home/u/.ssh/k": "/home"} {
		if got, err := rootOf(p); err != nil || got != want {
			t.Errorf("rootOf(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"etc/hosts", "/", "/proc/x", "/sys/fs/cgroup/x", "/dev/null", "/etcfile"} {
		if _, err := rootOf(p); err == nil {
			t.Errorf("rootOf(%q) accepted", p)
		}
	}
}

// TestStage lays out a node against a fake host root: upper layers for /etc and /var, the
// image's accounts, the package directories, the node's files with their modes and owners,
// and files under /run deferred to the node's init.
func TestStage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to chown, as CI has")
	}
	host := t.TempDir()
	for _, d := range []string{"etc/munge", "var/lib", "home"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(host, "etc/munge"), 0o700); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(host, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(host, "etc/group"), []byte("root:x:0:\n"), 0o644))
	dir := t.TempDir()
	files := []File{
		{Path: "/etc/munge/munge.key", Mode: 0o400, UID: 900, GID: 900, Data: []byte("key")},
		{Path: "/etc/sysconfig/slurmd", Mode: 0o644, Data: []byte("SLURMD_OPTIONS=\n")},
		{Path: "/home/u/note", Mode: 0o600, UID: 1000, GID: 1000, Data: []byte("hi")},
		{Path: "/run/extra", Mode: 0o644, Data: []byte("late")},
	}
	s, err := stage(host, dir, "c1", []Account{{Name: "munge", UID: 900, GID: 900}, {Name: "slurm", UID: 901, GID: 901}}, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, o := range s.Overlays {
		targets = append(targets, o.Target)
	}
	if want := []string{"/etc", "/home", "/var"}; !slices.Equal(targets, want) {
		t.Errorf("overlays %q, want %q", targets, want)
	}
	if len(s.Late) != 2 || s.Late[0].Path != "/run/munge" || s.Late[1].Path != "/run/extra" {
		t.Errorf("late files %+v, want /run/munge then /run/extra", s.Late)
	}
	checks := []struct {
		path     string
		mode     fs.FileMode
		uid, gid uint32
	}{
		{"etc/munge", fs.ModeDir | 0o700, 900, 900},
		{"etc/munge/munge.key", 0o400, 900, 900},
		{"etc/sysconfig", fs.ModeDir | 0o755, 0, 0},
		{"var/spool/slurmctld", fs.ModeDir | 0o755, 901, 901},
		{"var/log/munge", fs.ModeDir | 0o700, 900, 900},
		{"home/u/note", 0o600, 1000, 1000},
	}
	for _, c := range checks {
		st, err := os.Stat(filepath.Join(dir, "upper", c.path))
		if err != nil {
			t.Error(err)
			continue
		}
		uid, gid := owner(st)
		if st.Mode() != c.mode || uid != c.uid || gid != c.gid {
			t.Errorf("%s: %v %d:%d, want %v %d:%d", c.path, st.Mode(), uid, gid, c.mode, c.uid, c.gid)
		}
	}
	pw, err := os.ReadFile(filepath.Join(dir, "upper/etc/passwd"))
	if err != nil || !strings.Contains(string(pw), "slurm:x:901:901:") {
		t.Errorf("passwd: %v\n%s", err, pw)
	}
	if _, err := stage(host, dir, "c1", nil, []File{{Path: "/nonexistent/x", Mode: 0o644}}, nil); err == nil {
		t.Error("file under a directory the host lacks accepted")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func owner(fi fs.FileInfo) (uint32, uint32) {
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

func TestUnitsFor(t *testing.T) {
	for _, tc := range []struct {
		role    string
		journal bool
		want    []string
	}{
		{"master", false, []string{"chronyd", "munge", "slurmctld"}},
		{"master", true, []string{"journald", "chronyd", "munge", "slurmctld"}},
		{"compute", true, []string{"journald", "chronyd", "munge", "slurmd"}},
		{"", false, []string{"munge"}},
	} {
		t.Run(fmt.Sprintf("%s journal=%v", tc.role, tc.journal), func(t *testing.T) {
			var got []string
			for _, u := range unitsFor(tc.role, tc.journal) {
				got = append(got, u.name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// A node with a journal gets a /dev of its own (for /dev/log) even without devices; a node with
// neither keeps the host's.
func TestAddDevicesJournal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		devices []Device
		devLog  bool
		ownDev  bool
	}{
		{"neither", nil, false, false},
		{"journal only", nil, true, true},
		{"devices only", []Device{{Path: "/dev/nvidia0", Major: 195}}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s initSpec
			if err := s.addDevices(t.TempDir(), tc.devices, tc.devLog); err != nil {
				t.Fatal(err)
			}
			if got := s.DevStage != ""; got != tc.ownDev || s.DevLog != tc.devLog {
				t.Errorf("own /dev %v, /dev/log %v; want %v, %v", got, s.DevLog, tc.ownDev, tc.devLog)
			}
		})
	}
}
