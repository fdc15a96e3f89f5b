package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDisks(t *testing.T) {
	for _, tc := range []struct {
		name, file, err string
		args            map[string][]string // node -> NodeKernelArgs
	}{
		{name: "default: RAM only", file: "", args: map[string][]string{"c1": {"rd.bootd.ram=50%"}}},
		{name: "a role's disk, one node's own", file: `[writable]
ram = "8G"
[disks.fast]
use = ["scratch"]
roles = ["compute"]
model = "Samsung_SSD_870*"
min_size = "200G"
[disks.c3disk]
use = ["scratch"]
nodes = ["c3"]
serial = "S4EW"
wipe = true
`, args: map[string][]string{
			"c1":     {"rd.bootd.ram=8G", "rd.bootd.disk=fast:scratch:model=Samsung_SSD_870*,minsize=214748364800"},
			"c3":     {"rd.bootd.ram=8G", "rd.bootd.disk=c3disk:scratch:serial=S4EW,wipe=1"},
			"master": {"rd.bootd.ram=8G"},
		}},
		{name: "a cache disk for a role, scratch and cache on one node's disk", file: `[disks.cache]
use = ["cache"]
roles = ["compute"]
min_size = "100G"
[disks.both]
use = ["scratch", "cache"]
nodes = ["c3"]
serial = "S4EW"
`, args: map[string][]string{
			"c1": {"rd.bootd.ram=50%", "rd.bootd.disk=cache:cache:minsize=107374182400"},
			"c3": {"rd.bootd.ram=50%", "rd.bootd.disk=both:scratch+cache:serial=S4EW"},
		}},
		{name: "bad ram", file: "[writable]\nram = \"95%\"\n", err: `:2: writable.ram: "95%" is not a share of RAM`},
		{name: "no selector", file: "[disks.a]\nuse = [\"scratch\"]\nroles = [\"compute\"]\n", err: `:1: disks.a: names no disk`},
		{name: "no nodes", file: "[disks.a]\nuse = [\"scratch\"]\nserial = \"X\"\n", err: `disks.a: names no nodes`},
		{name: "wipe by model", file: "[disks.a]\nuse = [\"scratch\"]\nroles = [\"compute\"]\nmodel = \"X*\"\nwipe = true\n", err: `:5: disks.a.wipe: wipe needs a disk named exactly`},
		{name: "a device name", file: "[disks.a]\nuse = [\"scratch\"]\nroles = [\"compute\"]\npath = \"/dev/sdb\"\n", err: `:4: disks.a.path: "/dev/sdb" is not a /dev/disk/by-* link`},
		{name: "a space in a serial", file: "[disks.a]\nuse = [\"scratch\"]\nroles = [\"compute\"]\nserial = \"A B\"\n", err: `:4: disks.a.serial: "A B" holds a character`},
		{name: "unknown use", file: "[disks.a]\nuse = [\"swap\"]\nroles = [\"compute\"]\nserial = \"A\"\n", err: `:2: disks.a.use: unknown use "swap"`},
		{name: "two rules for one role", file: "[disks.a]\nuse = [\"scratch\"]\nroles = [\"compute\"]\nserial = \"A\"\n[disks.b]\nuse = [\"scratch\"]\nroles = [\"compute\"]\nserial = \"B\"\n",
			err: `disks.b: gives role compute the same use as [disks.a]`},
		{name: "unknown key", file: "[disks.a]\nsize = \"1T\"\n", err: `:2: disks.a.size: unknown key (known in [disks.NAME]: max_size, min_size, model, nodes, path, roles, serial, use, wipe, wwn)`},
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
			for node, want := range tc.args {
				p, err := c.Place(node)
				if err != nil {
					t.Fatal(err)
				}
				if got := c.NodeKernelArgs(node, p.Role); !slices.Equal(got, want) {
					t.Errorf("%s: %q, want %q", node, got, want)
				}
			}
		})
	}
}
