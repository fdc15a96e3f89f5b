//go:build e2e

// Package e2e holds the end-to-end suites: network namespaces and QEMU PCs that netboot for real
// (root; run with `make e2e`).
package e2e
