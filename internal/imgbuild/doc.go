// Package imgbuild wires an image build: spec (layers and image) -> resolve (lock, fetch) ->
// rootfs (layers, cache, normalize) -> pack (kernel, initramfs, squashfs) -> artifact (a
// versioned directory that appears whole or not at all).
package imgbuild
