package overlay

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestModulePathOrder sources the rendered /etc/profile.d/modulepath.sh twice (a login shell,
// then another inside it) in dash and bash, under set -u, after what OpenHPC's lmod.sh leaves
// in MODULEPATH: the shared tree first, the operating system's module files last, nothing twice.
func TestModulePathOrder(t *testing.T) {
	const shared, osDirs = "/opt/software/modules/all", "/etc/modulefiles:/usr/share/modulefiles"
	script := filepath.Join(t.TempDir(), "modulepath.sh")
	if err := os.WriteFile(script, fileData(t, reference(), "c1", "/etc/profile.d/modulepath.sh"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, before string // before: MODULEPATH when the file is sourced ("unset": none)
		want         string
	}{
		{"no module system ran", "unset", shared + ":" + osDirs},
		{"OpenHPC's, for a user", "/opt/ohpc/pub/modulefiles", shared + ":/opt/ohpc/pub/modulefiles:" + osDirs},
		{"OpenHPC's, for root", "/opt/ohpc/admin/modulefiles:/opt/ohpc/pub/modulefiles",
			shared + ":/opt/ohpc/admin/modulefiles:/opt/ohpc/pub/modulefiles:" + osDirs},
		{"OpenHPC's os module loaded", "/opt/ohpc/pub/modulefiles:" + osDirs, shared + ":/opt/ohpc/pub/modulefiles:" + osDirs},
		{"the shared tree already last", "/opt/ohpc/pub/modulefiles:" + shared, "/opt/ohpc/pub/modulefiles:" + shared + ":" + osDirs},
	} {
		for _, shell := range []string{"sh", "bash"} {
			t.Run(tt.name+" in "+shell, func(t *testing.T) {
				cmd := exec.Command(shell, "-c", `set -u
. "$1"; echo "$MODULEPATH"
. "$1"; echo "$MODULEPATH"
echo "EASYBUILD_INSTALLPATH=$EASYBUILD_INSTALLPATH helper=${_bootd_dir-unset}"`, shell, script)
				cmd.Env = []string{"PATH=/usr/bin:/bin"}
				if tt.before != "unset" {
					cmd.Env = append(cmd.Env, "MODULEPATH="+tt.before)
				}
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				want := []string{tt.want, tt.want, "EASYBUILD_INSTALLPATH=/opt/software helper=unset"}
				if got := strings.Split(strings.TrimSpace(string(out)), "\n"); !slices.Equal(got, want) {
					t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			})
		}
	}
}

// rockyOpenMPIModule is a module file shaped as Rocky 9's openmpi package installs it at
// /usr/share/modulefiles/mpi/openmpi-x86_64: Tcl, one MPI at a time.
const rockyOpenMPIModule = `#%Module 1.0
conflict mpi
prepend-path PATH /usr/lib64/openmpi/bin
prepend-path LD_LIBRARY_PATH /usr/lib64/openmpi/lib
setenv MPI_BIN /usr/lib64/openmpi/bin
setenv MPI_HOME /usr/lib64/openmpi
`

// TestModulePathWithLmod has the real Lmod (Debian's) load, after what OpenHPC's lmod.sh does
// (MODULEPATH set, Lmod started, module try-add ohpc) and the rendered modulepath.sh, an MPI module file where Rocky's openmpi puts it
// and an EasyBuild module in the shared tree: the layers' "module load mpi/openmpi-x86_64". The
// files go into a private mount namespace (a tmpfs on /opt, an overlay on /usr/share).
func TestModulePathWithLmod(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root for a mount namespace: run as root, as CI does")
	}
	if _, err := os.Stat(lmodInit); err != nil {
		t.Fatalf("Lmod not installed (Debian: lmod; scripts/setup-debian.sh installs it): %v", err)
	}
	dir := t.TempDir()
	for _, d := range []string{"upper", "work", "home"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"modulepath.sh":  string(fileData(t, reference(), "c1", "/etc/profile.d/modulepath.sh")),
		"openmpi-x86_64": rockyOpenMPIModule,
		"hello-1.0.lua":  "prepend_path(\"PATH\", \"/opt/software/software/hello/1.0/bin\")\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := `set -e
d=$1
mount -t tmpfs tmpfs /opt
mount -t overlay overlay -o "lowerdir=/usr/share,upperdir=$d/upper,workdir=$d/work" /usr/share
mkdir -p /usr/share/modulefiles/mpi /opt/ohpc/pub/modulefiles /opt/software/modules/all/hello
cp "$d/openmpi-x86_64" /usr/share/modulefiles/mpi/
cp "$d/hello-1.0.lua" /opt/software/modules/all/hello/1.0.lua
export HOME=$d/home MODULEPATH=/opt/ohpc/pub/modulefiles
. ` + lmodInit + `
module try-add ohpc
. "$d/modulepath.sh"
module -t avail 2>&1
module load mpi/openmpi-x86_64 hello
echo "MPI_BIN=$MPI_BIN"
echo "LOADED=$LOADEDMODULES"`
	out, err := exec.Command("unshare", "--mount", "--propagation", "private", "bash", "-c", script, "bash", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, want := range []string{"mpi/openmpi-x86_64", "hello/1.0", "MPI_BIN=/usr/lib64/openmpi/bin", "LOADED=mpi/openmpi-x86_64:hello/1.0"} {
		if !slices.Contains(lines, want) {
			t.Errorf("no line %q:\n%s", want, out)
		}
	}
}

// lmodInit is Debian's Lmod shell setup; the images' lmod-ohpc has its own under /opt/ohpc.
const lmodInit = "/usr/share/lmod/lmod/init/bash"
