package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"
	"golang.org/x/term"

	"github.com/labcluster/gpucluster/internal/cli"
	"github.com/labcluster/gpucluster/internal/imgbuild"
)

// common are the flags every command takes.
type common struct {
	layers, site, out, cache, logFormat string
	quiet                               bool
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.layers, "layers", "", "layers directory (default: layers/ beside the image file's directory)")
	fs.StringVar(&c.site, "site", "", "site file pointing repositories at local mirrors")
	fs.StringVar(&c.out, "out", "/var/lib/bootd/images", "images directory: where versions are written (bootd's --images)")
	fs.StringVar(&c.cache, "cache", "/var/cache/imgbuild", "cache of downloaded RPMs and built layers")
	fs.StringVar(&c.logFormat, "log-format", "text", "text or json (json for CI and journald)")
	fs.BoolVar(&c.quiet, "q", false, "no progress bars, warnings and errors only")
}

func (c *common) options() (imgbuild.Options, error) {
	log := logrus.New()
	log.SetOutput(os.Stderr)
	switch c.logFormat {
	case "text":
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{})
	default:
		return imgbuild.Options{}, fmt.Errorf("--log-format %q: want text or json", c.logFormat)
	}
	// Absolute: the build chroots and hands these to tools that run elsewhere ("--cache ./c").
	cache, err := filepath.Abs(c.cache)
	if err != nil {
		return imgbuild.Options{}, err
	}
	out, err := filepath.Abs(c.out)
	if err != nil {
		return imgbuild.Options{}, err
	}
	o := imgbuild.Options{LayersDir: c.layers, SitePath: c.site, OutDir: out, CacheDir: cache, Log: log}
	if c.quiet {
		log.SetLevel(logrus.WarnLevel)
	} else if c.logFormat == "text" && term.IsTerminal(int(os.Stderr.Fd())) {
		o.Progress = newBar(os.Stderr).update
	}
	return o, nil
}

// parse parses flags placed before or after the positional arguments, and wants n of them.
func parse(fs *flag.FlagSet, args []string, n int, what string) ([]string, error) {
	pos, err := cli.ParseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, err
	}
	if err != nil {
		return nil, errUsage
	}
	if n >= 0 && len(pos) != n {
		return nil, fmt.Errorf("%w: want %s", errUsage, what)
	}
	return pos, nil
}

// packageArchive is --package-archive as the build fetches from it: a URL as given, a directory
// made absolute (the fetcher takes a path only when absolute: a relative one failed for every
// package and the build fell through to the mirrors), and refused here when it is no directory.
func packageArchive(s string) (string, error) {
	if s == "" || strings.Contains(s, "://") {
		return s, nil
	}
	dir, err := filepath.Abs(s)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("--package-archive %s: not a directory (want a directory or URL of <sha256>.rpm files)", s)
	}
	return dir, nil
}
