package spec

import (
	"path/filepath"
	"slices"
	"testing"
)

// The repository's own layers and images: they must load and resolve,
// and keep the properties the rest of the build relies on.
const (
	layersDir = "../../layers"
	imagesDir = "../../images"
)

func TestRealLayersLoad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(layersDir, "*.toml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no layers: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			l, err := LoadLayer(f)
			if err != nil {
				t.Fatal(err)
			}
			if l.Description == "" {
				t.Error("no description")
			}
		})
	}
}

func TestRealImagesResolve(t *testing.T) {
	for _, name := range []string{"master", "compute"} {
		t.Run(name, func(t *testing.T) {
			p := resolveReal(t, name, nil)
			if got := layerNames(p); got[0] != "base" {
				t.Errorf("layers %v do not start with base", got)
			}
			args := p.KernelArgs()
			if !slices.Equal(args[:2], []string{"console=tty0", "console=ttyS0,115200n8"}) {
				t.Errorf("kernel args %v", args)
			}
			if !slices.Contains(args, "rd.driver.blacklist=nouveau") {
				t.Errorf("kernel args %v lack the nvidia layer's", args)
			}
		})
	}
}

func resolveReal(t *testing.T, name string, site *Site) *Plan {
	t.Helper()
	img, err := LoadImage(filepath.Join(imagesDir, name+".toml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Resolve(img, layersDir, site)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func layerNames(p *Plan) []string {
	var names []string
	for _, l := range p.Layers {
		names = append(names, l.Name)
	}
	return names
}

// TestRealRoles checks what each role gets from the shared layers.
func TestRealRoles(t *testing.T) {
	master, compute := resolveReal(t, "master", nil), resolveReal(t, "compute", nil)
	tests := []struct {
		name    string
		p       *Plan
		has     []string
		hasNot  []string
		enables []string
	}{
		{"master", master, []string{"slurm-ohpc", "slurm-slurmctld-ohpc", "slurm-slurmdbd-ohpc", "pdsh", "fail2ban", "nvidia-driver-cuda", "xfsprogs"},
			[]string{"slurm-slurmd-ohpc"}, []string{"slurmctld", "nfs-server", "fail2ban", "munge"}},
		{"compute", compute, []string{"slurm-ohpc", "slurm-slurmd-ohpc", "nfs-utils", "nvidia-driver-cuda", "kmod-nvidia-open-dkms", "cuda-toolkit-12-6"},
			[]string{"slurm-slurmctld-ohpc", "slurm-slurmdbd-ohpc", "pdsh", "fail2ban", "nvidia-open"}, []string{"slurmd", "munge", "nvidia-persistenced"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkgs := tt.p.PackageNames()
			for _, p := range tt.has {
				if !slices.Contains(pkgs, p) {
					t.Errorf("no package %s", p)
				}
			}
			for _, p := range tt.hasNot {
				if slices.Contains(pkgs, p) {
					t.Errorf("package %s", p)
				}
			}
			enabled := enabledServices(tt.p)
			for _, s := range tt.enables {
				if !slices.Contains(enabled, s) {
					t.Errorf("service %s not enabled (enabled: %v)", s, enabled)
				}
			}
		})
	}
	if slices.Contains(enabledServices(compute), "nfs-server") {
		t.Error("compute enables nfs-server")
	}
	// Without a rendered slurmdbd.conf, slurmdbd would fail at every boot (overlays/README.md).
	for _, s := range []string{"slurmdbd", "mariadb"} {
		if slices.Contains(enabledServices(master), s) {
			t.Errorf("master enables %s", s)
		}
	}
}

func enabledServices(p *Plan) []string {
	var s []string
	for _, l := range p.Layers {
		s = append(s, l.Services.Enable...)
	}
	return s
}

// TestRealFixedIDs guards the ids every node must agree on; changing them
// breaks files already written with the old ones.
func TestRealFixedIDs(t *testing.T) {
	want := map[string]int{"munge": 900, "slurm": 901}
	for _, name := range []string{"master", "compute"} {
		p := resolveReal(t, name, nil)
		got := map[string]int{}
		for _, l := range p.Layers {
			for _, u := range l.Users {
				if u.UID != u.GID {
					t.Errorf("%s: user %s uid %d != gid %d", name, u.Name, u.UID, u.GID)
				}
				got[u.Name] = u.UID
			}
		}
		for user, id := range want {
			if got[user] != id {
				t.Errorf("%s: user %s has id %d, want %d", name, user, got[user], id)
			}
		}
	}
}

// TestRealSite moves every repo of the real layers to a local mirror, as
// the build tests do.
func TestRealSite(t *testing.T) {
	plain := resolveReal(t, "master", nil)
	site := &Site{Repos: map[string]RepoOverride{}}
	for _, r := range plain.Repos() {
		url, no := "file:///srv/mirror/"+r.ID+"/", false
		site.Repos[r.ID] = RepoOverride{BaseURL: &url, GPGCheck: &no}
	}
	for _, name := range []string{"master", "compute"} {
		p := resolveReal(t, name, site)
		for _, r := range p.Repos() {
			if r.BaseURL != "file:///srv/mirror/"+r.ID+"/" || r.GPGCheck {
				t.Errorf("%s: repo %+v not overridden", name, r)
			}
		}
	}
}

// TestRealPackages lists every package the images install; the build
// tests make a stand-in RPM for each. Run with -v to see them.
func TestRealPackages(t *testing.T) {
	var all []string
	for _, name := range []string{"master", "compute"} {
		all = append(all, resolveReal(t, name, nil).PackageNames()...)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	t.Logf("%d packages: %v", len(all), all)
}
