// Package docs_test checks the repository's documentation against the tree: every directory
// holding Go files must be in ARCHITECTURE.md's package map.
package docs_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMapListsEveryPackageDirectory walks the module and fails, naming the directory, for every
// directory with .go files (testdata excluded) that no line of the package map starts with.
func TestMapListsEveryPackageDirectory(t *testing.T) {
	listed := packageMap(t, "ARCHITECTURE.md")
	dirs := goDirs(t, "..")
	if len(dirs) == 0 {
		t.Fatal("found no directory with Go files under the module root")
	}
	for _, dir := range dirs {
		if !listed[dir+"/"] {
			t.Errorf("%s/ holds Go files but is missing from the package map of docs/ARCHITECTURE.md", dir)
		}
	}
}

// packageMap returns the first word of every line inside a code block of the file's
// "## Package map" section, up to the next "## " heading.
func packageMap(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	inSection, inBlock := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			inSection = line == "## Package map"
		case !inSection:
		case strings.HasPrefix(line, "```"):
			inBlock = !inBlock
		case inBlock:
			if fields := strings.Fields(line); len(fields) > 0 {
				listed[fields[0]] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(listed) == 0 {
		t.Fatalf(`%s has no "## Package map" section with code blocks listing directories`, path)
	}
	return listed
}

// goDirs returns, relative to root and with forward slashes, every directory under root that
// holds a .go file, leaving out testdata, hidden directories (.git) and other modules.
func goDirs(t *testing.T, root string) []string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dirs := make([]string, 0, len(seen))
	for dir := range seen {
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	return dirs
}
