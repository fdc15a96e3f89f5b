package config

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUEFIAndNodeImages(t *testing.T) {
	for _, tc := range []struct {
		name, file, err string
	}{
		{"snponly by MAC and maker", "[uefi]\nloader = \"snponly.efi\"\nsnponly = [\"00:1b:21\", \"52:54:00:12:34:56\"]\nfallback = false\n", ""},
		{"unknown loader", "[uefi]\nloader = \"ipxe.kpxe\"\n", `:2: uefi.loader: unknown loader "ipxe.kpxe"`},
		{"upper-case MAC", "[uefi]\nsnponly = [\"00:1B:21\"]\n", `:2: uefi.snponly: item 1: "00:1B:21" is not a MAC or a MAC prefix`},
		{"fallback not a bool", "[uefi]\nfallback = \"yes\"\n", `:2: uefi.fallback: want true or false`},
		{"node image", "[node_images]\nc7 = \"compute-legacy\"\nmaster = \"master-test\"\n", ""},
		{"node image for no node", "[node_images]\nx7 = \"compute-legacy\"\n", `:2: node_images.x7: "x7" is no node name`},
		{"node image not a name", "[node_images]\nc7 = \"../etc\"\n", `:2: node_images.c7: "../etc" is not an image name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bootd.toml")
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := Load(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Load: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "node image" {
				if p, _ := c.Place("c7"); p.Image != "compute-legacy" || p.Role != "compute" {
					t.Errorf("c7 placed %+v, want compute with image compute-legacy", p)
				}
				if p, _ := c.Place("c6"); p.Image != "compute" {
					t.Errorf("c6 placed %+v, want the role's image", p)
				}
			}
		})
	}
	u := UEFI{SNPOnly: []string{"00:1b:21", "52:54:00:12:34:56"}}
	for mac, want := range map[string]bool{"00:1b:21:aa:bb:cc": true, "52:54:00:12:34:56": true, "52:54:00:12:34:57": false, "00:1b:22:00:00:01": false} {
		hw, _ := net.ParseMAC(mac)
		if got := u.SNPOnlyFor(hw); got != want {
			t.Errorf("SNPOnlyFor(%s) = %v, want %v", mac, got, want)
		}
	}
}
