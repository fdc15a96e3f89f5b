package config

import (
	"fmt"
	"os"
	"path/filepath"
)

// FetchProgramName is the node's fetch program, built from this repository beside bootd.
const FetchProgramName = "bootd-fetch"

// fetchSearch is where a packaged bootd-fetch lives, after the directory of bootd's own
// executable (a variable for tests).
var fetchSearch = []string{"/usr/libexec/bootd", "/usr/lib/bootd"}

// FindFetchProgram returns the fetch program to send nodes: cfgPath (Config.FetchProgram) if
// set, which must exist, else bootd-fetch beside the running bootd (make build puts both in
// bin/), else in the packaged places. Without one (ok false, no error) nodes fetch their root as
// one file, as before chunked images.
func FindFetchProgram(cfgPath string) (path string, ok bool, err error) {
	if cfgPath != "" {
		if fi, err := os.Stat(cfgPath); err != nil || !fi.Mode().IsRegular() {
			return "", false, fmt.Errorf("fetch_program %s: not a regular file (build it: make build)", cfgPath)
		}
		return cfgPath, true, nil
	}
	dirs := fetchSearch
	if exe, err := os.Executable(); err == nil {
		dirs = append([]string{filepath.Dir(exe)}, dirs...)
	}
	for _, d := range dirs {
		p := filepath.Join(d, FetchProgramName)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, true, nil
		}
	}
	return "", false, nil
}
