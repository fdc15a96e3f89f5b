package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadCmdline(t *testing.T) {
	full := "initrd=initramfs.img ip=10.80.0.101::10.80.0.1:255.255.255.0:c1::none bootd=http://10.80.0.1 " +
		"root=live:http://10.80.0.1/images/compute/1/rootfs.squashfs rd.bootd.sha256=aa rd.bootd.index=http://10.80.0.1/images/compute/1/rootfs.caibx rd.bootd.index.sha256=bb"
	cases := []struct {
		name, cmdline, err string
		want               bootArgs
	}{
		{"bootd's command line", full, "", bootArgs{Bootd: "http://10.80.0.1", SHA256: "aa", Index: "http://10.80.0.1/images/compute/1/rootfs.caibx",
			IndexSHA256: "bb", Whole: "http://10.80.0.1/images/compute/1/rootfs.squashfs", Address: "10.80.0.101"}},
		{"the last occurrence wins, as dracut's getarg", full + " rd.bootd.sha256=cc", "", bootArgs{Bootd: "http://10.80.0.1", SHA256: "cc",
			Index: "http://10.80.0.1/images/compute/1/rootfs.caibx", IndexSHA256: "bb", Whole: "http://10.80.0.1/images/compute/1/rootfs.squashfs", Address: "10.80.0.101"}},
		{"no index: a version without chunks", strings.Replace(full, "rd.bootd.index=", "x=", 1), "no rd.bootd.index=", bootArgs{}},
		{"no bootd", strings.Replace(full, "bootd=", "x=", 1), "no bootd=", bootArgs{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "cmdline")
			if err := os.WriteFile(p, []byte(c.cmdline+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readCmdline(p)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}
