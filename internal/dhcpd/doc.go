// Package dhcpd is bootd's DHCPv4 listener: the authoritative server on the one lab segment bootd
// serves. It hands assigned nodes their reserved address and hostname, gives unknown PXE clients a
// short discovery lease, and points every PXE client at the right first-stage loader: the iPXE
// binary for its firmware over TFTP, the iPXE binary by URL for UEFI HTTP boot, and iPXE itself at
// bootd's HTTP script. Machines that are neither assigned nor PXE clients get no answer, so a laptop
// plugged into the lab switch is left alone.
//
// The package owns no state. Addresses come from a Leaser, which internal/bootd adapts from the
// inventory; Handler.Reply is a pure function of the request and the Leaser's answer, which is what
// the tests and the fuzz target exercise. Handler.Serve puts it on a socket with server4.
package dhcpd
