// Package deptest checks the import rules of the project's packages as tests:
// which packages a program or package may depend on, directly or not.
package deptest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Graph maps each package to the packages it imports (test files excluded).
type Graph map[string][]string

// Rule forbids From, and everything it depends on, to be or depend on any
// package in Forbidden (a path, or the tree under it).
type Rule struct {
	Name      string
	From      string
	Forbidden []string
}

// Violations names, for each forbidden package reached from r.From in g, the
// chain of imports that reaches it, shortest first found.
func (g Graph) Violations(r Rule) []string {
	var out []string
	for _, path := range g.chains(r.From) {
		dep := path[len(path)-1]
		if forbidden(dep, r.Forbidden) {
			out = append(out, fmt.Sprintf("%s: %s", r.Name, strings.Join(path, " -> ")))
		}
	}
	return out
}

// chains returns one shortest import chain from root to every package it
// depends on, in breadth-first order.
func (g Graph) chains(root string) [][]string {
	chain := map[string][]string{root: {root}}
	queue, out := []string{root}, [][]string{}
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		for _, imp := range g[pkg] {
			if _, seen := chain[imp]; seen {
				continue
			}
			chain[imp] = append(slices.Clone(chain[pkg]), imp)
			out = append(out, chain[imp])
			queue = append(queue, imp)
		}
	}
	return out
}

func forbidden(pkg string, prefixes []string) bool {
	for _, p := range prefixes {
		if pkg == p || strings.HasPrefix(pkg, p+"/") {
			return true
		}
	}
	return false
}

// Load asks go list for the import graph of patterns and everything they
// depend on, from the module that holds the working directory.
func Load(patterns ...string) (Graph, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	const format = "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{if not .Standard}}{{.Dir}}\t{{join .GoFiles \" \"}}{{end}}"
	args := append([]string{"list", "-deps", "-f", format}, patterns...)
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v: %s", err, stderr.Bytes())
	}
	g := Graph{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		g[f[0]] = strings.Fields(f[1])
		if len(f) == 4 {
			noteSources(f[2], strings.Fields(f[3]))
		}
	}
	return g, sc.Err()
}

// noteSources reads the package's directory and stats its files: go test
// caches a test's result against what the test itself opened, not what go
// list read, so without this a cached pass would hide an import added since.
func noteSources(dir string, files []string) {
	os.ReadDir(dir)
	for _, f := range files {
		os.Stat(filepath.Join(dir, f))
	}
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	for err == nil {
		if _, statErr := os.Stat(filepath.Join(dir, "go.mod")); statErr == nil {
			return dir, nil
		}
		if parent := filepath.Dir(dir); parent != dir {
			dir = parent
			continue
		}
		err = fmt.Errorf("no go.mod above the working directory")
	}
	return "", err
}

// goTool is the go command that runs the tests, or the one on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}
