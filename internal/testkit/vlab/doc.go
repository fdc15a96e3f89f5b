// Package vlab is a virtual lab for end-to-end tests and the demo: a network
// namespace with a bridge, QEMU PCs on it, and a tiny test image.
//
// Everything a Lab starts lives inside its own network namespace (named with
// a "vlab-" prefix), so DHCP and TFTP traffic never leaves it: servers bind to
// the lab's bridge, and each VM gets a tap device on that bridge. QEMU always
// runs with software emulation (-accel tcg) because KVM guests hang on the
// build machines, and every wait is bounded by a context.
//
// Close tears everything down (processes, taps, the namespace) and is safe to
// call more than once, so tests register it with t.Cleanup right after New.
package vlab
