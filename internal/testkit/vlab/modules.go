package vlab

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"strings"
)

// nicModules are the modules the test image loads: the NICs the lab's VMs
// have (e1000 for BIOS, virtio-net for UEFI) plus the virtio PCI transport,
// which virtio_net does not depend on but needs to find the device.
var nicModules = []string{"e1000", "virtio_net", "virtio_pci"}

// modDeps maps a module name to its file and dependency files, as listed in
// modules.dep (paths relative to /lib/modules/<release>).
type modDeps struct {
	path map[string]string   // name -> file
	deps map[string][]string // file -> files it depends on
}

// moduleName is the name modprobe uses for a module file: base name without
// .ko and compression suffix, dashes as underscores.
func moduleName(file string) string {
	base := path.Base(file)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// parseModulesDep reads modules.dep ("file: dep dep ...").
func parseModulesDep(r io.Reader) (*modDeps, error) {
	md := &modDeps{path: map[string]string{}, deps: map[string][]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		file, deps, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("modules.dep line %d: missing colon", n)
		}
		file = strings.TrimSpace(file)
		md.path[moduleName(file)] = file
		md.deps[file] = strings.Fields(deps)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read modules.dep: %w", err)
	}
	return md, nil
}

// resolve returns the files of the named modules and all their
// dependencies, each once, dependencies before the modules needing them: the
// order insmod must load them in.
func (md *modDeps) resolve(names []string) ([]string, error) {
	var order []string
	state := map[string]int{} // 1: visiting, 2: done
	var visit func(file string) error
	visit = func(file string) error {
		switch state[file] {
		case 1:
			return fmt.Errorf("module dependency cycle at %s", file)
		case 2:
			return nil
		}
		deps, ok := md.deps[file]
		if !ok {
			return fmt.Errorf("module file %s not in modules.dep", file)
		}
		state[file] = 1
		for _, d := range deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		state[file] = 2
		order = append(order, file)
		return nil
	}
	for _, n := range names {
		file, ok := md.path[strings.ReplaceAll(n, "-", "_")]
		if !ok {
			return nil, fmt.Errorf("module %s not in modules.dep", n)
		}
		if err := visit(file); err != nil {
			return nil, err
		}
	}
	return order, nil
}
