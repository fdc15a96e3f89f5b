package imgbuild

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitRepo is a repository whose images/ was last committed at 1700000000 and whose layers/ was
// committed later, at 1800000000.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "images", "compute.toml"), "x")
	writeFile(t, filepath.Join(dir, "layers", "base.toml"), "x")
	git := func(date string, args ...string) {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.org"}, args...)...)
		cmd.Env = append(cmd.Environ(), "GIT_AUTHOR_DATE=@"+date+" +0000", "GIT_COMMITTER_DATE=@"+date+" +0000")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	git("", "init", "-q")
	for _, c := range []struct{ dir, date string }{{"images", "1700000000"}, {"layers", "1800000000"}} {
		git(c.date, "add", c.dir)
		git(c.date, "commit", "-q", "-m", c.dir)
	}
	return dir
}

func TestSourceDateEpoch(t *testing.T) {
	repo := gitRepo(t)
	tests := []struct {
		name, env string
		want      int64
		err       string
	}{
		{"from the environment", "1763683200", 1763683200, ""},
		{"last commit touching the image's directory", "", 1700000000, ""},
		{"zero, which rpm would ignore", "0", 0, `SOURCE_DATE_EPOCH="0": want a positive Unix time`},
		{"negative", "-1", 0, "want a positive Unix time"},
		{"not a number", "yesterday", 0, "want a positive Unix time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("SOURCE_DATE_EPOCH", tt.env)
			got, err := sourceDateEpoch(filepath.Join(repo, "images", "compute.toml"))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %d, %v; want an error containing %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}
