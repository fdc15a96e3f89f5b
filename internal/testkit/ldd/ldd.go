// Package ldd lists the files a dynamically linked host program needs at run time, as ldd
// prints them, so that test images can carry host programs (NFS tools, curl, bash).
package ldd

import (
	"fmt"
	"os/exec"
	"strings"
)

// Needs returns the absolute paths of the shared libraries prog loads and of its loader, in
// ldd's order. A library ldd cannot find is an error: the image would not run the program.
func Needs(prog string) ([]string, error) {
	out, err := exec.Command("ldd", prog).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", prog, err)
	}
	paths, missing := Parse(string(out))
	if len(missing) > 0 {
		return nil, fmt.Errorf("ldd %s: libraries not found: %s", prog, strings.Join(missing, ", "))
	}
	return paths, nil
}

// Parse reads ldd's output: the libraries ("libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6
// (0x...)") and the loader ("/lib64/ld-linux-x86-64.so.2 (0x...)") by path, and the names of
// libraries it could not find ("libfoo.so.1 => not found"). The vDSO has no file.
func Parse(out string) (paths, missing []string) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			paths = append(paths, f[2])
		case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
			missing = append(missing, f[0])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			paths = append(paths, f[0])
		}
	}
	return paths, missing
}
