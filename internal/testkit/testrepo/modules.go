package testrepo

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Module is a dnf module stream the repository offers: its packages are hidden from dnf until
// the stream is enabled (modular filtering), as NVIDIA's nvidia-driver streams are.
type Module struct {
	Name, Stream string
	Packages     []string // names of packages in pkgs that belong to the stream
}

// AddModules publishes modules.yaml (modulemd v2) for mods into the repository at dir, which
// Build made from pkgs. modifyrepo_c adds it to the repodata the way real repositories carry it.
func AddModules(ctx context.Context, dir string, mods []Module, pkgs []Package) error {
	byName := map[string]Package{}
	for _, p := range pkgs {
		byName[p.Name] = p.withDefaults()
	}
	var doc strings.Builder
	for _, m := range mods {
		if err := writeModulemd(&doc, m, byName); err != nil {
			return err
		}
	}
	yaml := filepath.Join(dir, "modules.yaml")
	if err := os.WriteFile(yaml, []byte(doc.String()), 0o644); err != nil {
		return err
	}
	defer os.Remove(yaml)
	cmd := exec.CommandContext(ctx, "modifyrepo_c", "--mdtype=modules", "--no-compress", yaml, filepath.Join(dir, "repodata"))
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "TZ=UTC"}
	return runCmd(cmd)
}

func writeModulemd(w *strings.Builder, m Module, byName map[string]Package) error {
	fmt.Fprintf(w, "---\ndocument: modulemd\nversion: 2\ndata:\n  name: %s\n  stream: %s\n  version: 1\n  context: 00000000\n  arch: x86_64\n", m.Name, m.Stream)
	fmt.Fprintf(w, "  summary: stand-in stream\n  description: stand-in stream for tests\n  license:\n    module: [MIT]\n")
	fmt.Fprintf(w, "  profiles:\n    default:\n      rpms: [%s]\n  artifacts:\n    rpms:\n", strings.Join(m.Packages, ", "))
	for _, name := range m.Packages {
		p, ok := byName[name]
		if !ok {
			return fmt.Errorf("module %s:%s: no package %s in the repository", m.Name, m.Stream, name)
		}
		fmt.Fprintf(w, "      - %s-0:%s-%s.%s\n", p.Name, p.Version, p.Release, p.Arch)
	}
	w.WriteString("...\n")
	return nil
}
