package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/bootd"
	"github.com/labcluster/gpucluster/internal/cli"
	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/httpd"
)

const serveHelp = `Usage: bootd serve [--config F] [--interface IF] [--state-dir D] [--images D]

Runs the appliance on one interface: authoritative DHCP for the lab subnet, TFTP for the iPXE
binaries, HTTP for iPXE scripts and images, and the control socket for the other commands.
Without a config file the reference lab applies: subnet 10.80.0.0/24, master at 10.80.0.100,
cN at 10.80.0.(100+N), discovery pool 10.80.0.200-249. The interface needs an IPv4 address in
the subnet (it is bootd's own address). Flags override the config file.
`

func runServe(args []string) error {
	fs := cli.NewFlagSet("serve", serveHelp)
	var (
		configPath = fs.String("config", "", "TOML config file (optional; unknown keys are errors)")
		iface      = fs.String("interface", "", "the one interface to serve on, e.g. eth1")
		stateDir   = fs.String("state-dir", "", "inventory and control socket (default "+config.Default().StateDir+")")
		images     = fs.String("images", "", "images directory, as imgbuild writes it (default "+config.Default().ImagesDir+")")
		ipxeDir    = fs.String("ipxe-dir", "", "directory with undionly.kpxe and ipxe.efi (default: /usr/lib/ipxe or /usr/share/ipxe)")
		logFormat  = fs.String("log-format", "", "text or json (json suits journald and CI)")
		debug      = fs.Bool("debug", false, "log every DHCP exchange and transfer detail")
	)
	rest, err := cli.ParseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected %q (the interface goes in --interface %s)", errUsage, rest[0], rest[0])
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	override(&cfg.Interface, *iface)
	override(&cfg.StateDir, *stateDir)
	override(&cfg.ImagesDir, *images)
	override(&cfg.IPXEDir, *ipxeDir)
	override(&cfg.LogFormat, *logFormat)
	log, err := newLogger(cfg.LogFormat, *debug)
	if err != nil {
		return err
	}
	sizeRuntime(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return bootd.Run(ctx, cfg, log)
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

func newLogger(format string, debug bool) (*logrus.Logger, error) {
	log := logrus.New()
	log.SetOutput(os.Stderr)
	switch format {
	case "", "text":
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{})
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
	if debug {
		log.SetLevel(logrus.DebugLevel)
	}
	return log, nil
}

// usageErr turns a flag parsing error (already printed by the flag package) into errUsage,
// keeping --help a success.
func usageErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return errUsage
}

// sizeRuntime gives the Go runtime one P more per download copier thread, each of which holds
// a P while inside sendfile (internal/httpd/bulk.go): without them, a boot storm's downloads
// held every P and DHCP answers waited seconds. An admin's GOMAXPROCS stands.
func sizeRuntime(log logrus.FieldLogger) {
	if os.Getenv("GOMAXPROCS") != "" {
		log.WithField("gomaxprocs", runtime.GOMAXPROCS(0)).Info("GOMAXPROCS set in the environment: kept, with no Ps added for the download copiers")
		return
	}
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + httpd.ExtraProcs())
	log.WithField("gomaxprocs", runtime.GOMAXPROCS(0)).Debug("go runtime sized for the download copiers")
}
