package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/bootd"
	"github.com/labcluster/gpucluster/internal/cli"
	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/httpd"
)

const serveHelp = `Usage: bootd serve [--config F] [--interface IF] [--state-dir D] [--images D] [--empty-inventory]

Runs the appliance on one interface: authoritative DHCP for the lab subnet, TFTP for the iPXE
binaries, HTTP for iPXE scripts and images, and the control socket for the other commands.
Without a config file the reference lab applies: subnet 10.80.0.0/24, master at 10.80.0.100,
cN at 10.80.0.(100+N), discovery pool 10.80.0.200-249. The interface needs an IPv4 address in
the subnet (it is bootd's own address). Flags override the config file; a relative path in a
flag is taken from the directory bootd is started in (the config file wants absolute paths).
The log format is --log-format, else log_format of the config file, else $BOOTD_LOG_FORMAT (the
systemd unit sets json, for journald), else text.

The state directory, and every file bootd keeps in it, must belong to bootd's user and be
writable by no one else, and so must the secrets, which no one else may read either: bootd
refuses to start otherwise, naming the file. It also refuses to start without an inventory.json
when the state directory holds secrets of an earlier run (restore the file from a backup, or
pass --empty-inventory to start with no nodes: their host keys are kept, not revoked).
`

func runServe(args []string) error {
	o, err := parseServe(args, os.Getenv)
	if err != nil {
		return err
	}
	log := newLogger(o.cfg.LogFormat, o.debug)
	for _, r := range o.resolved {
		log.WithFields(logrus.Fields{"flag": "--" + r.flag, "given": r.given, "path": r.path}).Info("relative path on the command line: taken from the directory bootd was started in")
	}
	sizeRuntime(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return bootd.Run(ctx, o.cfg, o.start, log)
}

// serveOptions is what serve's command line and environment decide.
type serveOptions struct {
	cfg      config.Config
	start    bootd.StartOptions
	debug    bool
	resolved []resolvedPath // relative path flags made absolute, to log
}

// parseServe reads serve's flags over the config file they name; getenv is os.Getenv.
func parseServe(args []string, getenv func(string) string) (serveOptions, error) {
	fs := cli.NewFlagSet("serve", serveHelp)
	var (
		configPath = fs.String("config", "", "TOML config file (optional; unknown keys are errors)")
		iface      = fs.String("interface", "", "the one interface to serve on, e.g. eth1")
		stateDir   = fs.String("state-dir", "", "inventory and control socket (default "+config.Default().StateDir+")")
		images     = fs.String("images", "", "images directory, as imgbuild writes it (default "+config.Default().ImagesDir+")")
		ipxeDir    = fs.String("ipxe-dir", "", "directory with undionly.kpxe and ipxe.efi (default: /usr/lib/ipxe or /usr/share/ipxe)")
		logFormat  = fs.String("log-format", "", "text or json (default: log_format of the config file, else $"+logFormatEnv+", else text)")
		debug      = fs.Bool("debug", false, "log every DHCP exchange and transfer detail")
		emptyInv   = fs.Bool("empty-inventory", false, "start with no nodes although the state dir holds secrets but no inventory.json (a lost inventory)")
	)
	rest, err := cli.ParseInterleaved(fs, args)
	if err != nil {
		return serveOptions{}, usageErr(err)
	}
	if len(rest) > 0 {
		return serveOptions{}, fmt.Errorf("%w: unexpected %q (the interface goes in --interface %s)", errUsage, rest[0], rest[0])
	}
	resolved, err := absPaths([]pathFlag{{"config", configPath}, {"state-dir", stateDir}, {"images", images}, {"ipxe-dir", ipxeDir}})
	if err != nil {
		return serveOptions{}, err
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return serveOptions{}, err
	}
	override(&cfg.Interface, *iface)
	override(&cfg.StateDir, *stateDir)
	override(&cfg.ImagesDir, *images)
	override(&cfg.IPXEDir, *ipxeDir)
	if cfg.LogFormat, err = pickLogFormat(cfg, *logFormat, getenv(logFormatEnv)); err != nil {
		return serveOptions{}, err
	}
	return serveOptions{cfg: cfg, start: bootd.StartOptions{EmptyInventory: *emptyInv}, debug: *debug, resolved: resolved}, nil
}

// pathFlag is a flag naming a file or directory.
type pathFlag struct {
	name  string
	value *string
}

// resolvedPath is a relative path flag made absolute.
type resolvedPath struct{ flag, given, path string }

// absPaths makes the path flags absolute, against the directory bootd was started in. A path
// typed on a command line is relative to the shell it was typed in: resolving it is what the
// admin meant, as with any other command, and doing it at once keeps its meaning in the log and
// in everything bootd opens later. The config file refuses relative paths instead, because there
// "relative to what" would be a guess (the file's directory, or wherever bootd was started).
func absPaths(flags []pathFlag) ([]resolvedPath, error) {
	var resolved []resolvedPath
	for _, f := range flags {
		if *f.value == "" || filepath.IsAbs(*f.value) {
			continue
		}
		abs, err := filepath.Abs(*f.value)
		if err != nil {
			return nil, fmt.Errorf("--%s %s: %w", f.name, *f.value, err)
		}
		resolved = append(resolved, resolvedPath{f.name, *f.value, abs})
		*f.value = abs
	}
	return resolved, nil
}

// logFormatEnv names the log format's lowest default: dist/bootd.service sets it to json for
// journald. Only a default, so that log_format in the config file and --log-format win over
// the unit (which once passed --log-format json and so overrode the file).
const logFormatEnv = "BOOTD_LOG_FORMAT"

// pickLogFormat returns the log format: --log-format, else the config file's log_format (which
// config checks), else $BOOTD_LOG_FORMAT, else the default (text). A bad one is named by where it
// came from.
func pickLogFormat(cfg config.Config, flagValue, env string) (string, error) {
	format, from := cfg.LogFormat, ""
	switch {
	case flagValue != "":
		format, from = flagValue, "--log-format"
	case cfg.FromFile("log_format"):
	case env != "":
		format, from = env, "$"+logFormatEnv
	}
	if format != "text" && format != "json" {
		return "", fmt.Errorf("%w: %s %q: want text or json", errUsage, from, format)
	}
	return format, nil
}

func loadConfig(path string) (config.Config, error) {
	if path == "" {
		return config.Default(), nil
	}
	return config.Load(path)
}

func override(dst *string, flagValue string) {
	if flagValue != "" {
		*dst = flagValue
	}
}

// newLogger logs to stderr in format, json or text (pickLogFormat checked it).
func newLogger(format string, debug bool) *logrus.Logger {
	log := logrus.New()
	log.SetOutput(os.Stderr)
	log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	if format == "json" {
		log.SetFormatter(&logrus.JSONFormatter{})
	}
	if debug {
		log.SetLevel(logrus.DebugLevel)
	}
	return log
}

// usageErr turns a flag parsing error (already printed by the flag package) into errUsage,
// keeping --help a success.
func usageErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return errUsage
}

// sizeRuntime gives the Go runtime one P more per download slot (the sendfile calls in flight
// across all downloads), each of which holds a P while inside its call (internal/httpd/bulk.go):
// without them, a boot storm's downloads held every P and DHCP answers waited seconds. An
// admin's GOMAXPROCS stands.
func sizeRuntime(log logrus.FieldLogger) {
	if os.Getenv("GOMAXPROCS") != "" {
		log.WithField("gomaxprocs", runtime.GOMAXPROCS(0)).Info("GOMAXPROCS set in the environment: kept, with no Ps added for the downloads' sendfile calls")
		return
	}
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + httpd.ExtraProcs())
	log.WithField("gomaxprocs", runtime.GOMAXPROCS(0)).Debug("go runtime sized for the downloads' sendfile calls")
}
