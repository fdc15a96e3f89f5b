// Package procstat reads a process's state, parent, group and CPU time from /proc/<pid>/stat, and
// single fields of /proc/<pid>/status.
package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Stat is what bootd's tests and benchmarks read of a process.
type Stat struct {
	State string // one letter: R running, S sleeping, Z zombie, ...
	PPid  int    // parent
	PGrp  int    // process group
	CPU   time.Duration
}

// clockTick is USER_HZ, the unit of the file's times: 100 on every Linux that matters.
const clockTick = 100

// Read parses /proc/<pid>/stat.
func Read(pid int) (Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	s, err := parseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return s, nil
}

// parseStat reads a stat file's content. The command name, in parentheses, may hold spaces and
// parentheses of its own, so the fields are counted from after its last ')'.
func parseStat(b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, errors.New("no command name")
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 of proc(5)
	if len(f) < 13 {
		return Stat{}, fmt.Errorf("%d fields after the command name, want 13 or more", len(f))
	}
	// ppid, pgrp, utime, stime: f[k] is field k+3 of proc(5).
	var v [4]int64
	for i, k := range [4]int{1, 2, 11, 12} {
		var err error
		if v[i], err = strconv.ParseInt(f[k], 10, 64); err != nil {
			return Stat{}, fmt.Errorf("field %d: %w", k+3, err)
		}
	}
	return Stat{State: f[0], PPid: int(v[0]), PGrp: int(v[1]), CPU: time.Duration(v[2]+v[3]) * time.Second / clockTick}, nil
}

// Alive reports whether pid is a running process: it exists and is not a zombie.
func Alive(pid int) bool {
	s, err := Read(pid)
	return err == nil && s.State != "Z"
}

// Status is the value of key in /proc/<pid>/status as the kernel writes it ("VmHWM" gives
// "  1234 kB", tabs and spaces kept after the colon's tab), or "" when the file has no such key.
func Status(pid int, key string) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":\t"); ok {
			return v, nil
		}
	}
	return "", nil
}
