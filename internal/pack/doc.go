// Package pack turns a normalized image tree into the boot artifacts: the
// root file system as a reproducible squashfs (made by mksquashfs), and the
// kernel and dracut initramfs the image built for itself, found in the tree.
package pack
