package spec

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// layer writes a minimal layer file body named name with extra TOML.
func layer(name, extra string) string {
	return "name = \"" + name + "\"\n" + extra
}

// image writes an image file body for role listing layers.
func image(name, role string, layers ...string) string {
	return "name = \"" + name + "\"\nrole = \"" + role + "\"\n" +
		"layers = [\"" + strings.Join(layers, "\", \"") + "\"]\nreleasever = \"9\"\narch = \"x86_64\"\n"
}

// resolveIn writes files into a fresh directory, enters it (so that
// errors name short relative paths) and resolves images/<name>.toml with
// site.toml if the files hold one.
func resolveIn(t *testing.T, files map[string]string, name string) (*Plan, error) {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	t.Chdir(dir)
	img, err := LoadImage("images/" + name + ".toml")
	if err != nil {
		t.Fatal(err)
	}
	var site *Site
	if _, ok := files["site.toml"]; ok {
		if site, err = LoadSite("site.toml"); err != nil {
			t.Fatal(err)
		}
	}
	return Resolve(img, "layers", site)
}

const repoEPEL = "[[repos]]\nid = \"epel\"\nbaseurl = \"https://example.org/epel/\"\ngpgkey = \"https://example.org/epel.key\"\n"

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"missing listed layer", map[string]string{
			"images/compute.toml": image("compute", "compute", "base", "munge", "slurm"),
			"layers/base.toml":    layer("base", ""),
			"layers/munge.toml":   layer("munge", ""),
		}, `images/compute.toml:3: layers: no layer "slurm" (no layers/slurm.toml)`},
		{"missing required layer", map[string]string{
			"images/compute.toml": image("compute", "compute", "slurm"),
			"layers/slurm.toml":   layer("slurm", "requires = [\n  \"munge\",\n]\n"),
		}, `layers/slurm.toml:3: requires: no layer "munge" (no layers/munge.toml)`},
		{"broken layer", map[string]string{
			"images/compute.toml": image("compute", "compute", "base"),
			"layers/base.toml":    layer("base", "packages = 1\n"),
		}, `layers/base.toml:2: packages: want an array of strings, got integer 1`},
		{"cycle of two", map[string]string{
			"images/compute.toml": image("compute", "compute", "a", "b"),
			"layers/a.toml":       layer("a", "requires = [\"b\"]\n"),
			"layers/b.toml":       layer("b", "requires = [\"a\"]\n"),
		}, `layers/a.toml:2: requires: cycle a -> b -> a`},
		{"cycle through unlisted layers", map[string]string{
			"images/compute.toml": image("compute", "compute", "top"),
			"layers/top.toml":     layer("top", "requires = [\"x\"]\n"),
			"layers/x.toml":       layer("x", "requires = [\"y\"]\n"),
			"layers/y.toml":       layer("y", "requires = [\"top\"]\n"),
		}, `layers/top.toml:2: requires: cycle top -> x -> y -> top`},
		{"package in two layers", map[string]string{
			"images/compute.toml": image("compute", "compute", "a", "b"),
			"layers/a.toml":       layer("a", "packages = [\"bash\", \"pmix\"]\n"),
			"layers/b.toml":       layer("b", "packages = [\n  \"tar\",\n  \"pmix\",\n]\n"),
		}, `layers/b.toml:4: packages[1]: package "pmix" is also installed by layers/a.toml:2`},
		{"package in a layer and a role", map[string]string{
			"images/compute.toml": image("compute", "compute", "a", "b"),
			"layers/a.toml":       layer("a", "packages = [\"slurm-slurmd\"]\n"),
			"layers/b.toml":       layer("b", "[roles.compute]\npackages = [\"slurm-slurmd\"]\n"),
		}, `layers/b.toml:3: roles.compute.packages[0]: package "slurm-slurmd" is also installed by layers/a.toml:2`},
		{"package in a layer and its role", map[string]string{
			"images/compute.toml": image("compute", "compute", "a"),
			"layers/a.toml":       layer("a", "packages = [\"slurm\"]\n[roles.compute]\npackages = [\"slurm\"]\n"),
		}, `layers/a.toml:4: roles.compute.packages[0]: package "slurm" is also installed by layers/a.toml:2`},
		{"repo defined differently", map[string]string{
			"images/compute.toml": image("compute", "compute", "a", "b"),
			"layers/a.toml":       layer("a", repoEPEL),
			"layers/b.toml":       layer("b", repoEPEL+"gpgcheck = false\n"),
		}, `layers/b.toml:3: repos[0].id: repo "epel" is also defined differently in layers/a.toml:3`},
		{"same user", map[string]string{
			"images/compute.toml": image("compute", "compute", "a", "b"),
			"layers/a.toml":       layer("a", "[[groups]]\nname = \"g\"\ngid = 900\n[[users]]\nname = \"u\"\nuid = 900\ngid = 900\n"),
			"layers/b.toml":       layer("b", "[[users]]\nname = \"u\"\nuid = 901\ngid = 900\n"),
		}, `layers/b.toml:3: users[0].name: user "u" is also created by layers/a.toml:6`},
		{"same uid", map[string]string{
			"images/compute.toml": image("compute", "compute", "a", "b"),
			"layers/a.toml":       layer("a", "[[groups]]\nname = \"g\"\ngid = 900\n[[users]]\nname = \"u\"\nuid = 900\ngid = 900\n"),
			"layers/b.toml":       layer("b", "[[users]]\nname = \"v\"\nuid = 900\ngid = 900\n"),
		}, `layers/b.toml:4: users[0].uid: uid 900 is also given out by layers/a.toml:7`},
		{"same group", map[string]string{
			"images/compute.toml": image("compute", "compute", "a", "b"),
			"layers/a.toml":       layer("a", "[[groups]]\nname = \"g\"\ngid = 900\n"),
			"layers/b.toml":       layer("b", "[[groups]]\nname = \"g\"\ngid = 901\n"),
		}, `layers/b.toml:3: groups[0].name: group "g" is also created by layers/a.toml:3`},
		{"same gid", map[string]string{
			"images/compute.toml": image("compute", "compute", "a", "b"),
			"layers/a.toml":       layer("a", "[[groups]]\nname = \"g\"\ngid = 900\n"),
			"layers/b.toml":       layer("b", "[[groups]]\nname = \"h\"\ngid = 900\n"),
		}, `layers/b.toml:4: groups[0].gid: gid 900 is also given out by layers/a.toml:4`},
		{"same file", map[string]string{
			"images/compute.toml": image("compute", "compute", "a", "b"),
			"layers/a.toml":       layer("a", "[[files]]\npath = \"/etc/motd\"\ncontent = \"a\"\n"),
			"layers/b.toml":       layer("b", "[[roles.compute.files]]\npath = \"/etc/motd\"\ncontent = \"b\"\n"),
		}, `layers/b.toml:3: roles.compute.files[0].path: file "/etc/motd" is also written by layers/a.toml:3`},
		{"service enabled twice", map[string]string{
			"images/compute.toml": image("compute", "compute", "a", "b"),
			"layers/a.toml":       layer("a", "services = { enable = [\"munge\"] }\n"),
			"layers/b.toml":       layer("b", "[services]\nenable = [\"munge\"]\n"),
		}, `layers/b.toml:3: services.enable[0]: service "munge" is also enabled by layers/a.toml:2`},
		{"user's group later", map[string]string{
			"images/compute.toml": image("compute", "compute", "a", "b"),
			"layers/a.toml":       layer("a", "[[users]]\nname = \"u\"\nuid = 900\ngid = 900\n"),
			"layers/b.toml":       layer("b", "[[groups]]\nname = \"g\"\ngid = 900\n"),
		}, `layers/a.toml:5: users[0].gid: no group with gid 900 in this or an earlier layer`},
		{"site repo nowhere", map[string]string{
			"images/compute.toml": image("compute", "compute", "a"),
			"layers/a.toml":       layer("a", repoEPEL),
			"site.toml":           "[repos.epel]\ngpgcheck = false\n\n[repos.cuda]\nbaseurl = \"file:///srv/cuda/\"\n",
		}, `site.toml:4: repos.cuda: no layer in layers defines repo "cuda"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := resolveIn(t, tt.files, "compute")
			if err == nil {
				t.Fatal("resolved, want an error")
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got %s\nwant %s", err, tt.want)
			}
		})
	}
}

func TestResolveOrder(t *testing.T) {
	tests := []struct {
		name   string
		layers map[string]string // name -> requires (TOML array body)
		listed []string
		want   []string
	}{
		{"as listed", map[string]string{"a": "", "b": "", "c": ""},
			[]string{"c", "a", "b"}, []string{"c", "a", "b"}},
		{"dependency moves later layers up", map[string]string{"a": `"c"`, "b": "", "c": ""},
			[]string{"a", "b", "c"}, []string{"b", "c", "a"}},
		{"unlisted before its first dependant", map[string]string{"base": "", "epel": `"base"`, "x": `"epel"`, "y": `"epel"`},
			[]string{"base", "x", "y"}, []string{"base", "epel", "x", "y"}},
		{"unlisted chain", map[string]string{"a": `"b"`, "b": `"c"`, "c": "", "d": ""},
			[]string{"d", "a"}, []string{"d", "c", "b", "a"}},
		{"diamond", map[string]string{"base": "", "l": `"base"`, "r": `"base"`, "top": `"l", "r"`},
			[]string{"top", "r", "l", "base"}, []string{"base", "r", "l", "top"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{"images/compute.toml": image("compute", "compute", tt.listed...)}
			for name, req := range tt.layers {
				files["layers/"+name+".toml"] = layer(name, "requires = ["+req+"]\n")
			}
			p, err := resolveIn(t, files, "compute")
			if err != nil {
				t.Fatal(err)
			}
			if got := layerNames(p); !slices.Equal(got, tt.want) {
				t.Errorf("order %v, want %v", got, tt.want)
			}
		})
	}
}

// TestResolveRoles checks that each role gets its parts merged, and that
// what one role adds does not conflict with the other role's.
func TestResolveRoles(t *testing.T) {
	files := map[string]string{
		"images/master.toml":  image("master", "master", "base", "slurm"),
		"images/compute.toml": image("compute", "compute", "base", "slurm"),
		"layers/base.toml":    layer("base", "packages = [\"bash\"]\n"),
		"layers/slurm.toml": layer("slurm", `packages = ["slurm"]
[roles.master]
packages = ["slurm-slurmctld"]
services = { enable = ["slurmctld"] }
kernel_args = ["m=1"]
[[roles.master.files]]
path = "/etc/slurm/x"
content = "master"
[[roles.master.run]]
command = "echo master"
[roles.compute]
packages = ["slurm-slurmd"]
services = { enable = ["slurmd"] }
[[roles.compute.files]]
path = "/etc/slurm/x"
content = "compute"
`),
	}
	master, err := resolveIn(t, files, "master")
	if err != nil {
		t.Fatal(err)
	}
	compute, err := Resolve(mustImage(t, "images/compute.toml"), "layers", nil)
	if err != nil {
		t.Fatal(err)
	}
	m, c := master.Layers[1], compute.Layers[1]
	check := func(what string, got, want any) {
		t.Helper()
		if !equal(got, want) {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	check("master packages", master.PackageNames(), []string{"bash", "slurm", "slurm-slurmctld"})
	check("compute packages", compute.PackageNames(), []string{"bash", "slurm", "slurm-slurmd"})
	check("master services", m.Services.Enable, []string{"slurmctld"})
	check("compute services", c.Services.Enable, []string{"slurmd"})
	check("master file", m.Files[0].Content, "master")
	check("master run", len(m.Run), 1)
	check("compute run", len(c.Run), 0)
	check("master kernel args", master.KernelArgs(), []string{"m=1"})
	check("roles left", m.Roles == nil && c.Roles == nil, true)
	check("base digests", master.Layers[0].Digest == compute.Layers[0].Digest, true)
	check("slurm digests", m.Digest == c.Digest, false)
	if master.Digest == compute.Digest {
		t.Error("master and compute plans share a digest")
	}
}

func mustImage(t *testing.T, path string) *Image {
	t.Helper()
	img, err := LoadImage(path)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func equal(a, b any) bool {
	as, ok1 := a.([]string)
	bs, ok2 := b.([]string)
	if ok1 && ok2 {
		return slices.Equal(as, bs)
	}
	return a == b
}

func TestResolveReposAndSite(t *testing.T) {
	files := map[string]string{
		"images/compute.toml": image("compute", "compute", "a", "b"),
		"layers/a.toml": layer("a", "[[repos]]\nid = \"baseos\"\nbaseurl = \"https://example.org/baseos/\"\n"+
			"gpgkey = \"https://example.org/key\"\n"+repoEPEL),
		"layers/b.toml": layer("b", repoEPEL),
		"layers/c.toml": layer("c", "[[repos]]\nid = \"cuda\"\nbaseurl = \"https://example.org/cuda/\"\ngpgcheck = false\n"),
		"site.toml": "[repos.epel]\nbaseurl = \"file:///srv/epel/\"\ngpgcheck = false\n" +
			"[repos.baseos]\ngpgkey = \"file:///srv/baseos.key\"\n" +
			"[repos.cuda]\nbaseurl = \"file:///srv/cuda/\"\n", // in layer c, which this image lacks
	}
	p, err := resolveIn(t, files, "compute")
	if err != nil {
		t.Fatal(err)
	}
	want := []Repo{
		{ID: "baseos", BaseURL: "https://example.org/baseos/", GPGKey: "file:///srv/baseos.key", GPGCheck: true},
		{ID: "epel", BaseURL: "file:///srv/epel/", GPGKey: "https://example.org/epel.key"},
	}
	if got := p.Repos(); !slices.Equal(got, want) {
		t.Errorf("repos %+v, want %+v", got, want)
	}
	plain, err := Resolve(p.Image, "layers", nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Digest == p.Digest {
		t.Error("the site's overrides do not change the plan digest")
	}
	if !slices.EqualFunc(plain.Layers, p.Layers, func(a, b *Layer) bool { return a.Digest == b.Digest }) {
		t.Error("the site's overrides change layer digests")
	}
}

// TestRepoArch: a repo whose baseurl names another architecture than the image's is refused
// where that baseurl is written, the layer's or the site mirror's; a mirror for the image's own
// architecture makes the layer usable.
func TestRepoArch(t *testing.T) {
	const rocky = "[[repos]]\nid = \"baseos\"\nbaseurl = \"https://dl.rockylinux.org/pub/rocky/9/BaseOS/x86_64/os/\"\ngpgcheck = false\n"
	arm := strings.Replace(image("compute", "compute", "a"), "x86_64", "aarch64", 1)
	tests := []struct {
		name  string
		files map[string]string
		want  string // "" resolves
	}{
		{"the layer's own architecture", map[string]string{
			"images/compute.toml": image("compute", "compute", "a"),
			"layers/a.toml":       layer("a", rocky),
		}, ""},
		{"a layer for another architecture", map[string]string{
			"images/compute.toml": arm,
			"layers/a.toml":       layer("a", rocky),
		}, `layers/a.toml:4: repos[0].baseurl: repo "baseos" is for x86_64 (its baseurl says so), but image compute is aarch64: give this image a layer, or a site mirror, for its own architecture`},
		{"a site mirror for the image's architecture", map[string]string{
			"images/compute.toml": arm,
			"layers/a.toml":       layer("a", rocky),
			"site.toml":           "[repos.baseos]\nbaseurl = \"file:///srv/mirror/rocky/9/BaseOS/aarch64/os/\"\n",
		}, ""},
		{"a site mirror for another architecture", map[string]string{
			"images/compute.toml": arm,
			"layers/a.toml":       layer("a", "[[repos]]\nid = \"baseos\"\nbaseurl = \"https://example.org/baseos/\"\ngpgcheck = false\n"),
			"site.toml":           "[repos.baseos]\nbaseurl = \"file:///srv/mirror/x86_64/\"\n",
		}, `site.toml:2: repos.baseos.baseurl: repo "baseos" is for x86_64 (its baseurl says so), but image compute is aarch64: give this image a layer, or a site mirror, for its own architecture`},
		{"no architecture in the baseurl", map[string]string{
			"images/compute.toml": arm,
			"layers/a.toml":       layer("a", repoEPEL),
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := resolveIn(t, tt.files, "compute")
			if got := fmt.Sprint(err); (tt.want == "" && err != nil) || (tt.want != "" && got != tt.want) {
				t.Errorf("error\n got %v\nwant %s", err, tt.want)
			}
		})
	}
}
