// Package kickstart holds the templates internal/kickstart renders: an image's
// kickstart body (image.ks.tmpl) and a node's part around it (node.ks.tmpl),
// embedded so that bootd serves the templates it was built with.
package kickstart

import "embed"

// FS holds every template.
//
//go:embed *.tmpl
var FS embed.FS
