package overlay

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestChronyParses has the real chronyd parse each role's chrony.conf
// (chronyd -p prints the parsed configuration and exits; a bad directive is
// fatal).
func TestChronyParses(t *testing.T) {
	if _, err := exec.LookPath("chronyd"); err != nil {
		t.Fatal("chronyd not installed (Debian: chrony; scripts/setup-debian.sh installs it)")
	}
	offline := reference()
	offline.NTPServers = nil
	for _, tt := range []struct {
		name, node string
		c          Cluster
	}{
		{"master", "master", reference()},
		{"master without upstream", "master", offline},
		{"c1", "c1", reference()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conf := filepath.Join(t.TempDir(), "chrony.conf")
			if err := os.WriteFile(conf, fileData(t, tt.c, tt.node, "/etc/chrony.conf"), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("chronyd", "-p", "-f", conf).CombinedOutput()
			if err != nil {
				t.Fatalf("chronyd -p: %v\n%s", err, out)
			}
		})
	}
}

// TestSlurmctldAcceptsConf starts the real slurmctld (Debian's Slurm 22.05)
// on the rendered slurm.conf, in its own UTS, network and mount namespaces
// (hostname master, only loopback, private /run and /var/spool), and waits
// until it runs as the controller: proof that the file parses and that a
// partition of dynamic nodes with none registered yet is accepted.
func TestSlurmctldAcceptsConf(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root for namespaces: run as root, as CI does")
	}
	for _, tool := range []string{"slurmctld", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (Debian: slurmctld, util-linux; scripts/setup-debian.sh installs them)", tool)
		}
	}
	// No cgroups in a test namespace: the options a test harness uses.
	c := reference()
	c.Slurm = SlurmOptions{ProctrackType: "proctrack/linuxproc", TaskPlugin: "task/none"}
	dir := t.TempDir()
	// slurmctld reads the file again as SlurmUser: open the test's
	// directories (t.TempDir makes them 0700) to it.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(dir, "slurm.conf")
	if err := os.WriteFile(conf, fileData(t, c, "master", "/etc/slurm/slurm.conf"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `set -e
hostname master
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /var/spool
mkdir /var/spool/slurmctld && chown slurm /var/spool/slurmctld
ip link set lo up && ip addr add 10.80.0.100/24 dev lo
exec slurmctld -D -v -f "$1"`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--uts", "--net", "--mount", "--fork", "--kill-child",
		"sh", "-c", script, "sh", conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	var log []string
	for sc := bufio.NewScanner(out); sc.Scan(); {
		log = append(log, sc.Text())
		if strings.Contains(sc.Text(), "Running as primary controller") {
			return
		}
	}
	t.Fatalf("slurmctld did not start as controller:\n%s", strings.Join(log, "\n"))
}

func fileData(t *testing.T, c Cluster, node, path string) []byte {
	t.Helper()
	for _, f := range render(t, c, node) {
		if f.Path == path {
			return f.Data
		}
	}
	t.Fatalf("%s has no %s", node, path)
	return nil
}

// TestTmpfilesKeepAdminOwnership applies the master's rendered tmpfiles.d with the real
// systemd-tmpfiles, as two boots do: the first makes the directories (slurmctld's state
// directory slurm's, the rest root's); then the admin gives the software tree to the account
// that runs EasyBuild (`chown -R`, group-writable), and the second boot keeps that.
func TestTmpfilesKeepAdminOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to give files owners: run as root, as CI does")
	}
	if _, err := exec.LookPath("systemd-tmpfiles"); err != nil {
		t.Fatal("systemd-tmpfiles not installed (Debian: systemd)")
	}
	root := t.TempDir()
	for path, data := range map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nslurm:x:901:901::/var/lib/slurm:/sbin/nologin\neb:x:1500:1500::/home/eb:/bin/sh\n",
		"etc/group":  "root:x:0:\nslurm:x:901:\neb:x:1500:\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(t.TempDir(), "bootd.conf")
	if err := os.WriteFile(conf, fileData(t, reference(), "master", "/etc/tmpfiles.d/bootd.conf"), 0o644); err != nil {
		t.Fatal(err)
	}
	boot := func() {
		t.Helper()
		if out, err := exec.Command("systemd-tmpfiles", "--create", "--root="+root, conf).CombinedOutput(); err != nil {
			t.Fatalf("systemd-tmpfiles --create: %v\n%s", err, out)
		}
	}
	boot()
	software := filepath.Join(root, "opt/software")
	if err := filepath.Walk(software, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			err = os.Lchown(p, 1500, 1500)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(software, 0o775); err != nil {
		t.Fatal(err)
	}
	boot()
	for _, tc := range []struct {
		path     string
		mode     os.FileMode
		uid, gid uint32
	}{
		{"opt/software", 0o775, 1500, 1500},
		{"opt/software/modules/all", 0o755, 1500, 1500},
		{"home", 0o755, 0, 0},
		{"var/spool/slurmctld", 0o700, 901, 901},
	} {
		fi, err := os.Stat(filepath.Join(root, tc.path))
		if err != nil {
			t.Errorf("/%s: %v", tc.path, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() || fi.Mode().Perm() != tc.mode || st.Uid != tc.uid || st.Gid != tc.gid {
			t.Errorf("/%s: %v %d:%d, want a directory %04o %d:%d", tc.path, fi.Mode(), st.Uid, st.Gid, tc.mode, tc.uid, tc.gid)
		}
	}
}

// TestPowerFilesParse has the real visudo check the master's sudoers rule (sudo refuses to run
// at all with a broken file in sudoers.d) and sh parse the power-saving scripts.
func TestPowerFilesParse(t *testing.T) {
	for _, tool := range []string{"visudo", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (Debian: sudo; scripts/setup-debian.sh installs it)", tool)
		}
	}
	dir := t.TempDir()
	for _, tt := range []struct {
		path string
		cmd  []string
	}{
		{"/etc/sudoers.d/bootd-power", []string{"visudo", "-c", "-q", "-f"}},
		{"/etc/slurm/bootd-power", []string{"sh", "-n"}},
		{"/etc/slurm/bootd-suspend", []string{"sh", "-n"}},
		{"/etc/slurm/bootd-resume", []string{"sh", "-n"}},
	} {
		t.Run(tt.path, func(t *testing.T) {
			file := filepath.Join(dir, filepath.Base(tt.path))
			if err := os.WriteFile(file, fileData(t, reference(), "master", tt.path), 0o440); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(tt.cmd[0], append(tt.cmd[1:], file)...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(tt.cmd, " "), err, out)
			}
		})
	}
}
