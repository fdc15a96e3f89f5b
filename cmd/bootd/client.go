package main

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"

	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/ctl"
)

// clientFlags are the flags every command that talks to the daemon takes: where its socket is.
type clientFlags struct {
	stateDir   string
	configPath string
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.stateDir, "state-dir", "", "state directory of the running bootd (default: from --config, else "+config.Default().StateDir+")")
	fs.StringVar(&c.configPath, "config", "", "bootd's config file, to find its state directory")
}

func (c *clientFlags) client() (*ctl.Client, error) {
	dir := config.Default().StateDir
	if c.configPath != "" {
		cfg, err := config.Load(c.configPath)
		if err != nil {
			return nil, err
		}
		dir = cfg.StateDir
	}
	if c.stateDir != "" {
		dir = c.stateDir
	}
	return ctl.NewClient(filepath.Join(dir, ctl.SocketName)), nil
}

// printJSON writes a reply to standard output as indented JSON, for --json.
func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
