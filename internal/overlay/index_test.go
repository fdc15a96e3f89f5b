package overlay

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestIndexErrors(t *testing.T) {
	tests := []struct{ name, index, want string }{
		{"unknown key", "[[file]]\npath = \"/a\"\ntemplate = \"a.tmpl\"\nroles = [\"all\"]\ncolour = \"red\"\n", "unknown key"},
		{"relative path", "[[file]]\npath = \"etc/a\"\ntemplate = \"a.tmpl\"\nroles = [\"all\"]\n", "absolute"},
		{"bad mode", "[[file]]\npath = \"/a\"\ntemplate = \"a.tmpl\"\nroles = [\"all\"]\nmode = \"rw\"\n", "octal"},
		{"unknown owner", "[[file]]\npath = \"/a\"\ntemplate = \"a.tmpl\"\nroles = [\"all\"]\nowner = \"nobody\"\n", "unknown owner"},
		{"unknown role", "[[file]]\npath = \"/a\"\ntemplate = \"a.tmpl\"\nroles = [\"login\"]\n", "unknown role"},
		{"no roles", "[[file]]\npath = \"/a\"\ntemplate = \"a.tmpl\"\n", "roles is empty"},
		{"readable secret", "[[file]]\npath = \"/a\"\ntemplate = \"a.tmpl\"\nroles = [\"all\"]\nsecret = true\n", "secret file"},
		{"twice for a role", "[[file]]\npath = \"/a\"\ntemplate = \"a.tmpl\"\nroles = [\"all\"]\n[[file]]\npath = \"/a\"\ntemplate = \"a.tmpl\"\nroles = [\"compute\"]\n", "listed twice"},
		{"template leaves the tree", "[[file]]\npath = \"/a\"\ntemplate = \"../a.tmpl\"\nroles = [\"all\"]\n", "template"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{IndexFile: {Data: []byte(tt.index)}, "a.tmpl": {Data: []byte("x")}}
			_, err := loadIndex(fsys)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("loadIndex: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestRootKeyOnlyOnMaster: an index that (by mistake) gives root's private
// key to computes fails to render rather than leak it.
func TestRootKeyOnlyOnMaster(t *testing.T) {
	fsys := fstest.MapFS{
		IndexFile: {Data: []byte("[[file]]\npath = \"/root/.ssh/id_ed25519\"\ntemplate = \"k.tmpl\"\nroles = [\"all\"]\nmode = \"0600\"\nsecret = true\n")},
		"k.tmpl":  {Data: []byte("{{ rootPrivate }}")},
	}
	if _, err := Render(fsys, reference(), "master"); err != nil {
		t.Errorf("master: %v", err)
	}
	if _, err := Render(fsys, reference(), "c1"); err == nil || !strings.Contains(err.Error(), "root private key requested") {
		t.Errorf("c1: %v, want a refusal", err)
	}
}
