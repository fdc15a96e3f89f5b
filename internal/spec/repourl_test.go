package spec

import (
	"fmt"
	"strings"
	"testing"
)

// TestRepoVariables: $releasever and $basearch are filled in from the image in baseurl, gpgkey,
// archive and name; a repo checking signatures without a key is refused where it is written;
// archive templates name known fields only.
func TestRepoVariables(t *testing.T) {
	minor := strings.Replace(image("compute", "compute", "a"), `releasever = "9"`, `releasever = "9.8"`, 1)
	const rocky = "[[repos]]\nid = \"baseos\"\nname = \"Rocky $releasever\"\n" +
		"baseurl = \"https://dl.rockylinux.org/pub/rocky/$releasever/BaseOS/$basearch/os/\"\n" +
		"gpgkey = \"https://dl.rockylinux.org/pub/rocky/RPM-GPG-KEY-Rocky-9\"\n" +
		"archive = \"https://dl.rockylinux.org/vault/rocky/${releasever}/BaseOS/$basearch/os/{location}\"\n"
	tests := []struct {
		name  string
		files map[string]string
		want  string // the repo as %+v, or the error
	}{
		{"variables filled in", map[string]string{"images/compute.toml": minor, "layers/a.toml": layer("a", rocky)},
			"{ID:baseos Name:Rocky 9.8 BaseURL:https://dl.rockylinux.org/pub/rocky/9.8/BaseOS/x86_64/os/ " +
				"GPGKey:https://dl.rockylinux.org/pub/rocky/RPM-GPG-KEY-Rocky-9 GPGCheck:true " +
				"Archive:https://dl.rockylinux.org/vault/rocky/9.8/BaseOS/x86_64/os/{location}}"},
		{"no key", map[string]string{"images/compute.toml": minor,
			"layers/a.toml": layer("a", "\n[[repos]]\nid = \"x\"\nbaseurl = \"https://example.org/x/\"\n")},
			`layers/a.toml:3: repos[0]: repo "x" checks signatures (gpgcheck is on unless turned off) but names no gpgkey: give the URL of its signing key`},
		{"the site clears the key", map[string]string{"images/compute.toml": minor, "layers/a.toml": layer("a", rocky),
			"site.toml": "[repos.baseos]\ngpgkey = \"\"\n"},
			`site.toml:2: repos.baseos.gpgkey: repo "baseos" checks signatures (gpgcheck is on unless turned off) but names no gpgkey: give the URL of its signing key`},
		{"the site turns checks off with the key", map[string]string{"images/compute.toml": minor, "layers/a.toml": layer("a", rocky),
			"site.toml": "[repos.baseos]\ngpgkey = \"\"\ngpgcheck = false\nbaseurl = \"file:///srv/rocky/$releasever/\"\narchive = \"\"\n"},
			"{ID:baseos Name:Rocky 9.8 BaseURL:file:///srv/rocky/9.8/ GPGKey: GPGCheck:false Archive:}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := resolveIn(t, tt.files, "compute")
			got := fmt.Sprint(err)
			if err == nil {
				got = fmt.Sprintf("%+v", p.Repos()[0])
			}
			if got != tt.want {
				t.Errorf("\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestRepoURLErrors: unknown variables and archive fields are errors at the key.
func TestRepoURLErrors(t *testing.T) {
	tests := []struct{ name, repo, want string }{
		{"unknown variable", `baseurl = "https://example.org/$releasever_major/"`,
			`a.toml:4: repos[0].baseurl: unknown variable $releasever_major in "https://example.org/$releasever_major/" (known: $releasever, $basearch)`},
		{"unknown field", `baseurl = "https://example.org/"` + "\n" + `archive = "https://example.org/{name}"`,
			`a.toml:5: repos[0].archive: unknown field {name} in archive "https://example.org/{name}" (fields: location, file, arch, source_name, source_version, source_release)`},
		{"no field", `baseurl = "https://example.org/"` + "\n" + `archive = "https://example.org/all.rpm"`,
			`a.toml:5: repos[0].archive: archive "https://example.org/all.rpm" names no package field (want e.g. {location}; fields: location, file, arch, source_name, source_version, source_release)`},
		{"not a URL", `baseurl = "https://example.org/"` + "\n" + `archive = "vault/{location}"`,
			`a.toml:5: repos[0].archive: "vault/x" is not an http, https or file URL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"a.toml": "name = \"a\"\n[[repos]]\nid = \"x\"\n" + tt.repo + "\ngpgcheck = false\n"})
			t.Chdir(dir)
			_, err := LoadLayer("a.toml")
			if fmt.Sprint(err) != tt.want {
				t.Errorf("\n got %v\nwant %s", err, tt.want)
			}
		})
	}
}

// TestRepoKeyWhere names the gpgkey's line: the layer's, or the site's when it sets the key.
func TestRepoKeyWhere(t *testing.T) {
	files := map[string]string{"images/compute.toml": image("compute", "compute", "a"),
		"layers/a.toml": layer("a", repoEPEL+"\n[[repos]]\nid = \"b\"\nbaseurl = \"https://example.org/b/\"\ngpgkey = \"https://example.org/b.key\"\n"),
		"site.toml":     "[repos.b]\ngpgkey = \"file:///srv/b.key\"\n"}
	p, err := resolveIn(t, files, "compute")
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"epel": "layers/a.toml:5: repos[0].gpgkey", "b": "site.toml:2: repos.b.gpgkey", "c": "repo c"} {
		if got := p.RepoKeyWhere(id); got != want {
			t.Errorf("RepoKeyWhere(%s) = %q, want %q", id, got, want)
		}
	}
}

func TestFillArchive(t *testing.T) {
	const tpl = "https://kojipkgs.fedoraproject.org/packages/{source_name}/{source_version}/{source_release}/data/signed/3228467c/{arch}/{file}"
	got, err := FillArchive(tpl, map[string]string{"source_name": "slurm", "source_version": "22.05.9", "source_release": "1.el9",
		"arch": "x86_64", "file": "slurm-slurmd-22.05.9-1.el9.x86_64.rpm"})
	if want := "https://kojipkgs.fedoraproject.org/packages/slurm/22.05.9/1.el9/data/signed/3228467c/x86_64/slurm-slurmd-22.05.9-1.el9.x86_64.rpm"; err != nil || got != want {
		t.Errorf("FillArchive = %q, %v; want %q", got, err, want)
	}
	if _, err := FillArchive(tpl, map[string]string{"arch": "x86_64"}); err == nil || !strings.Contains(err.Error(), "{source_name}") && !strings.Contains(err.Error(), "{file}") {
		t.Errorf("FillArchive with fields missing: %v, want an error naming one", err)
	}
}
