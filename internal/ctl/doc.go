// Package ctl is bootd's local control API: JSON over HTTP on a unix socket in the state
// directory (mode 0600, so only root manages the lab), and the client the CLI uses. The CLI
// changes state only through the running daemon, never by writing its files.
package ctl
