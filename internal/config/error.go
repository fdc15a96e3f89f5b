package config

import "github.com/labcluster/gpucluster/internal/tomlpos"

// Error is a configuration error located as precisely as known: the file and
// line a value came from, and its key (dotted, as in network.subnet). It is
// the shared [tomlpos.Error], so that all of the project's TOML files report
// mistakes alike.
type Error = tomlpos.Error
