package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	fileA = "[[files]]\npath = \"/etc/a\"\nsource = \"files/a\"\n"
	fileB = "[[files]]\npath = \"/etc/b\"\ncontent = \"b\"\nmode = \"0600\"\n"
)

const digestLayer = `name = "d"
description = "digest test"
requires = ["base", "epel"]
packages = ["bash", "tar", "rsync"]
kernel_args = ["a=1", "b=2"]
[[repos]]
id = "epel"
baseurl = "https://example.org/epel/"
[modules]
enable = ["nvidia-driver:open-dkms"]
[[groups]]
name = "g"
gid = 900
[[users]]
name = "u"
uid = 900
gid = 900
home = "/home/u"
` + fileA + fileB + `[services]
enable = ["sshd", "munge"]
disable = ["kdump"]
[[run]]
command = "echo 1"
[[run]]
command = "echo 2"
[roles.master]
packages = ["m"]
`

// loadDigest writes the layer text (and files/a) into a fresh directory
// and returns the loaded layer's digest.
func loadDigest(t *testing.T, text, source string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"d.toml": text, "files/a": source})
	l, err := LoadLayer(filepath.Join(dir, "d.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return l.Digest
}

// TestDigestGolden pins the canonical form: a change here invalidates
// every lock and cache, so it must be deliberate (bump the Format).
func TestDigestGolden(t *testing.T) {
	const want = "15550f4d52a06be5ec9c8c076d9a07e7257d5d6230c11c05f44a91c122c807e0"
	if got := loadDigest(t, digestLayer, "a\n"); got != want {
		t.Errorf("digest %s, want %s", got, want)
	}
}

func TestDigestStable(t *testing.T) {
	want := loadDigest(t, digestLayer, "a\n")
	same := map[string]string{
		"again":              digestLayer,
		"comments and blank": "# comment\n\n" + strings.ReplaceAll(digestLayer, "\n[[", "\n\n[["),
		"packages reordered": strings.Replace(digestLayer, `["bash", "tar", "rsync"]`, `["rsync", "bash", "tar"]`, 1),
		"requires reordered": strings.Replace(digestLayer, `["base", "epel"]`, `["epel", "base"]`, 1),
		"services reordered": strings.Replace(digestLayer, `["sshd", "munge"]`, `["munge", "sshd"]`, 1),
		"defaults spelled":   strings.Replace(digestLayer, `content = "b"`, `content = "b"`+"\nowner = \"root\"\ngroup = \"root\"", 1),
		"inline table": strings.Replace(strings.Replace(digestLayer, "[modules]\nenable = [\"nvidia-driver:open-dkms\"]\n", "", 1),
			"kernel_args", `modules = { enable = ["nvidia-driver:open-dkms"] }`+"\nkernel_args", 1),
	}
	for name, text := range same {
		t.Run(name, func(t *testing.T) {
			if got := loadDigest(t, text, "a\n"); got != want {
				t.Errorf("digest changed: %s, want %s", got, want)
			}
		})
	}
}

func TestDigestSensitive(t *testing.T) {
	base := loadDigest(t, digestLayer, "a\n")
	changes := []struct{ name, old, new string }{
		{"description", `"digest test"`, `"digest test 2"`},
		{"requires", `["base", "epel"]`, `["base"]`},
		{"package added", `"rsync"]`, `"rsync", "less"]`},
		{"kernel args order", `["a=1", "b=2"]`, `["b=2", "a=1"]`},
		{"repo baseurl", `example.org/epel/`, `example.org/epel2/`},
		{"repo gpgcheck", `example.org/epel/"`, `example.org/epel/"` + "\ngpgcheck = false"},
		{"module", `open-dkms`, `latest-dkms`},
		{"gid", "gid = 900\n[[users]]", "gid = 901\n[[users]]"},
		{"uid", "uid = 900", "uid = 902"},
		{"home", `/home/u`, `/home/v`},
		{"file path", `"/etc/a"`, `"/etc/c"`},
		{"file source name", `"files/a"`, `"./files/a"`},
		{"file content", `content = "b"`, `content = "c"`},
		{"file mode", `"0600"`, `"0640"`},
		{"file owner", `mode = "0600"`, `mode = "0600"` + "\nowner = \"u\""},
		{"files order", fileA + fileB, fileB + fileA},
		{"service enabled", `["sshd", "munge"]`, `["sshd"]`},
		{"service disabled", `["kdump"]`, `[]`},
		{"run order", "command = \"echo 1\"\n[[run]]\ncommand = \"echo 2\"", "command = \"echo 2\"\n[[run]]\ncommand = \"echo 1\""},
		{"run description", `command = "echo 1"`, `command = "echo 1"` + "\ndescription = \"one\""},
		{"role package", `packages = ["m"]`, `packages = ["n"]`},
		{"role added", `[roles.master]`, "[roles.compute]\n[roles.master]"},
	}
	seen := map[string]string{base: "original"}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			text := strings.Replace(digestLayer, c.old, c.new, 1)
			if text == digestLayer {
				t.Fatalf("change %q does not apply", c.old)
			}
			got := loadDigest(t, text, "a\n")
			if prev, ok := seen[got]; ok {
				t.Errorf("digest %s same as for %s", got, prev)
			}
			seen[got] = c.name
		})
	}
	t.Run("source content", func(t *testing.T) {
		if got := loadDigest(t, digestLayer, "a!\n"); got == base {
			t.Error("digest ignores the source file's content")
		}
	})
}

// TestDigestSourceMoved checks that a layer directory copied elsewhere
// (another checkout, another machine) keeps its digest.
func TestDigestSourceMoved(t *testing.T) {
	a := loadDigest(t, digestLayer, "a\n")
	b := loadDigest(t, digestLayer, "a\n") // another TempDir
	if a != b {
		t.Errorf("digest depends on the directory: %s != %s", a, b)
	}
}

func TestPlanDigest(t *testing.T) {
	files := map[string]string{
		"images/compute.toml": image("compute", "compute", "a"),
		"layers/a.toml":       layer("a", "packages = [\"bash\"]\n"),
	}
	p1, err := resolveIn(t, files, "compute")
	if err != nil {
		t.Fatal(err)
	}
	p2, err := Resolve(mustImage(t, "images/compute.toml"), "layers", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p1.Digest != p2.Digest || len(p1.Digest) != 64 {
		t.Fatalf("plan digests %s and %s", p1.Digest, p2.Digest)
	}
	edits := map[string][2]string{
		"image kernel args": {"images/compute.toml", image("compute", "compute", "a") + "kernel_args = [\"quiet\"]\n"},
		"image release":     {"images/compute.toml", strings.Replace(image("compute", "compute", "a"), `"9"`, `"9.5"`, 1)},
		"layer package":     {"layers/a.toml", layer("a", "packages = [\"bash\", \"tar\"]\n")},
	}
	for name, e := range edits {
		t.Run(name, func(t *testing.T) {
			old, err := os.ReadFile(e[0])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.WriteFile(e[0], old, 0o644) })
			writeFiles(t, ".", map[string]string{e[0]: e[1]})
			p, err := Resolve(mustImage(t, "images/compute.toml"), "layers", nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.Digest == p1.Digest {
				t.Error("plan digest unchanged")
			}
		})
	}
}
