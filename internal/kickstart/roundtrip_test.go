package kickstart

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPostRoundTrip runs the rendered %post with /bin/sh, files written under
// a temporary root (KS_ROOT), and wants the exact bytes and mode back, and
// a command's output as written, whatever quoting, here-document delimiters
// and section keywords their text holds.
func TestPostRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("ks_file chowns to root: needs root, as CI has")
	}
	tmp := t.TempDir()
	tricky := "EOF\nKS_BASE64\n%end\n%post\n'\"$HOME `id` $(id) \\ \\n\x00\xff\r\nno final newline"
	files := []File{
		{Path: `/etc/odd dir/it's "$x".conf`, Mode: 0o750 | fs.ModeSetgid, Owner: "root", Group: "root", Open: bytesOf(tricky)},
		{Path: "/etc/empty", Mode: 0o600, Owner: "root", Group: "root", Open: bytesOf("")},
		{Path: "/etc/76", Mode: 0o644, Owner: "root", Group: "root", Open: bytesOf(strings.Repeat("x", 57))}, // one full line
		{Path: "/etc/big", Mode: 0o644, Owner: "root", Group: "root", Open: bytesOf(strings.Repeat("0123456789", 10000))},
	}
	img := Image{Name: "t", Role: "compute", SourceDateEpoch: 1767225600,
		Repos: []Repo{{ID: "baseos", BaseURL: "file:///srv/mirror/baseos/"}},
		Layers: []Layer{{
			Name:     "t",
			Packages: []Package{{Name: "t", Version: "1", Release: "1.el9", Arch: "noarch"}},
			Files:    files,
			Run: []Command{{Description: "tricky\nKS_RUN", Command: "cat >" + tmp + "/run.out <<'KS_RUN'\n" +
				"$HOME `id` \"q\" 'EOF'\nKS_RUN\nprintf '%s\\n' \"$HOME\" \"$SOURCE_DATE_EPOCH\" >>" + tmp + "/run.out\n"}},
		}},
	}
	body, err := Render(img, os.DirFS("../../kickstart"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkStructure(string(body)); err != nil {
		t.Fatal(err)
	}
	post := filepath.Join(tmp, "post.sh")
	if err := os.WriteFile(post, []byte(section(t, string(body), "%post")), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", post)
	cmd.Env = append(os.Environ(), "KS_ROOT="+tmp+"/root")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%%post: %v\n%s", err, out)
	}
	for _, f := range files {
		path := filepath.Join(tmp, "root", f.Path)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if want := readAll(t, f); !bytes.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", f.Path, got, want)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode() != f.Mode {
			t.Errorf("%s: mode %v (%v), want %v", f.Path, fi.Mode(), err, f.Mode)
		}
	}
	out, err := os.ReadFile(filepath.Join(tmp, "run.out"))
	if want := "$HOME `id` \"q\" 'EOF'\n/root\n1767225600\n"; err != nil || string(out) != want {
		t.Errorf("command wrote %q (%v), want %q", out, err, want)
	}
}

// section returns the body of the first section opened by header.
func section(t *testing.T, ks, header string) string {
	t.Helper()
	_, rest, ok := strings.Cut(ks, "\n"+header+" ")
	if !ok {
		t.Fatalf("no %s section", header)
	}
	_, rest, _ = strings.Cut(rest, "\n") // the header's options
	body, _, ok := strings.Cut(rest, "\n%end\n")
	if !ok {
		t.Fatalf("%s not closed", header)
	}
	return body + "\n"
}

func bytesOf(s string) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(s)), nil }
}

func readAll(t *testing.T, f File) []byte {
	t.Helper()
	r, err := f.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
