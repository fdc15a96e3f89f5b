// Package httpd is bootd's HTTP listener: the iPXE scripts that send a machine to the discovery
// screen or into its role, the image files those scripts fetch, the iPXE binaries for UEFI HTTP
// boot, a small JSON API and /healthz. It declares the interfaces it needs; bootd wires them.
package httpd
