package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// bootArgs are what bootd put on the kernel command line for the root image.
type bootArgs struct {
	Bootd, SHA256, Index, IndexSHA256, Whole string
	// Address is the node's static address (dracut's ip=<address>::...), "" without one.
	Address string
}

// readCmdline parses the kernel command line the way dracut's getarg does: the last occurrence
// of a key wins.
func readCmdline(path string) (bootArgs, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return bootArgs{}, err
	}
	var a bootArgs
	for _, f := range strings.Fields(string(b)) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "bootd":
			a.Bootd = strings.TrimSuffix(v, "/")
		case "rd.bootd.sha256":
			a.SHA256 = v
		case "rd.bootd.index":
			a.Index = v
		case "rd.bootd.index.sha256":
			a.IndexSHA256 = v
		case "root":
			a.Whole = strings.TrimPrefix(v, "live:")
		case "ip":
			if addr, _, ok := strings.Cut(v, ":"); ok {
				a.Address = addr
			}
		}
	}
	var missing []string
	for k, v := range map[string]string{"bootd=": a.Bootd, "rd.bootd.sha256=": a.SHA256, "root=live:": a.Whole} {
		if v == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return a, fmt.Errorf("%s: no %s", path, strings.Join(missing, ", "))
	}
	if a.Index == "" || a.IndexSHA256 == "" {
		return a, errors.New(path + ": no rd.bootd.index= with rd.bootd.index.sha256=: the version has no chunk index")
	}
	return a, nil
}
