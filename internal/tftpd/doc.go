// Package tftpd is bootd's read-only TFTP listener. It serves only the iPXE
// binaries (undionly.kpxe, ipxe.efi, snponly.efi) from one directory, so a
// PXE ROM can fetch the loader; everything after that goes over HTTP.
package tftpd
