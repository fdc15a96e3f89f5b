package rpmcmd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Header is the identity of one RPM file.
type Header struct {
	Name    string
	Epoch   int
	Version string
	Release string
	Arch    string
}

// NEVRA is name-epoch:version-release.arch, the epoch always written so
// the string sorts and compares the same way everywhere, and is what dnf
// takes to install exactly this package.
func (h Header) NEVRA() string {
	return fmt.Sprintf("%s-%d:%s-%s.%s", h.Name, h.Epoch, h.Version, h.Release, h.Arch)
}

const headerFormat = "%{NAME}\t%{EPOCHNUM}\t%{VERSION}\t%{RELEASE}\t%{ARCH}\n"

// ReadHeaders reads the headers of RPM files, in the order given, with one
// rpm run. It needs no root or database.
func ReadHeaders(ctx context.Context, files []string) ([]Header, error) {
	if len(files) == 0 {
		return nil, nil
	}
	// HOME: anything but the caller's, whose ~/.rpmmacros could change the
	// query format's output (e.g. a different %_dbpath does not matter,
	// but %_query_all_fmt and friends might).
	env := environ("/nonexistent", 0)
	args := append([]string{"-qp", "--nosignature", "--nodigest", "--qf", headerFormat}, files...)
	out, err := run(ctx, (&Env{}).log(), "rpm", args, env)
	if err != nil {
		return nil, fmt.Errorf("read package headers: %w", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(files) {
		return nil, fmt.Errorf("read package headers: %d files gave %d lines", len(files), len(lines))
	}
	hs := make([]Header, len(files))
	for i, l := range lines {
		h, err := parseHeader(l)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", files[i], err)
		}
		hs[i] = h
	}
	return hs, nil
}

func parseHeader(line string) (Header, error) {
	f := strings.Split(line, "\t")
	if len(f) != 5 {
		return Header{}, fmt.Errorf("unexpected header line %q", line)
	}
	epoch, err := strconv.Atoi(f[1])
	if err != nil {
		return Header{}, fmt.Errorf("epoch %q: %w", f[1], err)
	}
	return Header{Name: f[0], Epoch: epoch, Version: f[2], Release: f[3], Arch: f[4]}, nil
}
