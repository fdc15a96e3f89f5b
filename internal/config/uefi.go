package config

import (
	"fmt"
	"net"
	"strings"

	"github.com/BurntSushi/toml"
)

// The UEFI loaders bootd serves (internal/tftpd finds both in the iPXE directory).
const (
	LoaderIPXE    = "ipxe.efi"    // iPXE with its own network drivers
	LoaderSNPOnly = "snponly.efi" // iPXE over the firmware's own network driver (SNP)
)

// UEFI is how bootd picks a UEFI PC's first-stage loader.
type UEFI struct {
	// Loader is what UEFI PCs get: LoaderIPXE (default) or LoaderSNPOnly.
	Loader string
	// SNPOnly are the PCs that get snponly.efi whatever Loader says: MACs, or MAC prefixes of one
	// to five bytes (a NIC maker's, "00:1b:21"), lower-case with colons.
	SNPOnly []string
	// Fallback gives snponly.efi to a PC that fetched ipxe.efi and, instead of starting it, came
	// back to its firmware's netboot (boards that hang in ipxe.efi, once someone power-cycles
	// them). Default true.
	Fallback bool
}

// SNPOnlyFor reports whether the configuration names mac (or its maker) for snponly.efi.
func (u UEFI) SNPOnlyFor(mac net.HardwareAddr) bool {
	m := mac.String()
	for _, p := range u.SNPOnly {
		if m == p || strings.HasPrefix(m, p+":") {
			return true
		}
	}
	return false
}

// checkUEFI wants a known loader and MACs or MAC prefixes.
func (c Config) checkUEFI() error {
	if c.UEFI.Loader != LoaderIPXE && c.UEFI.Loader != LoaderSNPOnly {
		return c.err("uefi.loader", "unknown loader %q (want %q or %q)", c.UEFI.Loader, LoaderIPXE, LoaderSNPOnly)
	}
	for i, p := range c.UEFI.SNPOnly {
		if !macPrefix(p) {
			return c.err("uefi.snponly", "item %d: %q is not a MAC or a MAC prefix (want lower-case hex bytes with colons: \"52:54:00:12:34:56\", or a maker's \"00:1b:21\")", i+1, p)
		}
	}
	return nil
}

// macPrefix accepts one to six bytes as two lower-case hex digits each, joined by colons.
func macPrefix(s string) bool {
	parts := strings.Split(s, ":")
	if len(parts) > 6 {
		return false
	}
	for _, b := range parts {
		if len(b) != 2 || strings.Trim(b, "0123456789abcdef") != "" {
			return false
		}
	}
	return true
}

// setNodeImage stores a [node_images] entry: node name -> the image it boots instead of its role's.
func (c *Config) setNodeImage(k toml.Key, v any) error {
	if len(k) == 1 {
		if _, ok := v.(map[string]any); !ok {
			return fmt.Errorf("want a table ([node_images]), got %T", v)
		}
		return nil
	}
	if len(k) > 2 {
		return fmt.Errorf("unknown key (in [node_images], each key is a node name: c3 = \"compute-legacy\")")
	}
	img, err := asString(v)
	if err != nil {
		return err
	}
	if c.NodeImages == nil {
		c.NodeImages = map[string]string{}
	}
	c.NodeImages[k[1]] = img
	return nil
}

// checkNodeImages wants each entry to name a node the configuration places and an image name.
func (c Config) checkNodeImages() error {
	for name, img := range c.NodeImages {
		key := toml.Key{"node_images", name}.String()
		if _, err := c.place(name); err != nil {
			return c.err(key, "%q is no node name this configuration places (%v)", name, err)
		}
		if !validImageName(img) {
			return c.err(key, "%q is not an image name (letters, digits, _ . - as in images/<name>.toml)", img)
		}
	}
	return nil
}

// validImageName is a file name imgbuild can publish: images/<name>.toml, <images_dir>/<name>/.
func validImageName(s string) bool {
	return s != "" && s != "." && s != ".." && len(s) <= 64 && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == ""
}
