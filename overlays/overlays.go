// Package overlays holds the templates of the files bootd renders per node
// (see overlay.toml and README.md), embedded so that bootd serves the
// templates it was built with.
package overlays

import "embed"

// FS holds overlay.toml and every template it lists.
//
//go:embed overlay.toml */*.tmpl
var FS embed.FS
