package vlab

import (
	"bytes"
	"compress/gzip"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestResolveModules(t *testing.T) {
	f, err := os.Open("testdata/modules.dep")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	md, err := parseModulesDep(f)
	if err != nil {
		t.Fatal(err)
	}
	const (
		ring    = "kernel/drivers/virtio/virtio_ring.ko"
		virtio  = "kernel/drivers/virtio/virtio.ko"
		legacy  = "kernel/drivers/virtio/virtio_pci_legacy_dev.ko"
		modern  = "kernel/drivers/virtio/virtio_pci_modern_dev.ko"
		pci     = "kernel/drivers/virtio/virtio_pci.ko"
		e1000   = "kernel/drivers/net/ethernet/intel/e1000/e1000.ko"
		fo      = "kernel/net/core/failover.ko"
		netfo   = "kernel/drivers/net/net_failover.ko"
		vnet    = "kernel/drivers/net/virtio_net.ko"
		fuse    = "kernel/fs/fuse/fuse.ko"
		cuseMod = "kernel/fs/fuse/cuse.ko"
	)
	tests := []struct {
		name    string
		modules []string
		want    []string
		wantErr string
	}{
		{name: "no deps", modules: []string{"e1000"}, want: []string{e1000}},
		{name: "deps first", modules: []string{"cuse"}, want: []string{fuse, cuseMod}},
		{name: "transitive", modules: []string{"virtio_net"}, want: []string{fo, netfo, ring, virtio, vnet}},
		{name: "dash is underscore", modules: []string{"virtio-net"}, want: []string{fo, netfo, ring, virtio, vnet}},
		{name: "shared deps once", modules: nicModules, want: []string{e1000, fo, netfo, ring, virtio, vnet, legacy, modern, pci}},
		{name: "unknown", modules: []string{"nope"}, wantErr: "module nope not in modules.dep"},
		{name: "cycle", modules: []string{"loop_a"}, wantErr: "cycle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := md.resolve(tt.modules)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestModuleName(t *testing.T) {
	tests := []struct{ file, want string }{
		{"kernel/drivers/net/virtio_net.ko", "virtio_net"},
		{"kernel/drivers/a/loop-a.ko.xz", "loop_a"},
		{"kernel/fs/fuse/fuse.ko.zst", "fuse"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			if got := moduleName(tt.file); got != tt.want {
				t.Errorf("moduleName(%q) = %q, want %q", tt.file, got, tt.want)
			}
		})
	}
}

func TestWriteInitramfs(t *testing.T) {
	base := []cpioEntry{
		{Name: "init", Mode: modeFile | 0o755, Data: []byte("#!/bin/sh\n")},
		{Name: "bin/busybox", Mode: modeFile | 0o755, Data: []byte("12345")},
		{Name: "bin/sh", Mode: modeSymlink | 0o777, Data: []byte("busybox")},
		{Name: "dev/console", Mode: modeCharDev | 0o600, RMajor: 5, RMinor: 1},
	}
	reversed := slices.Clone(base)
	slices.Reverse(reversed)
	tests := []struct {
		name      string
		a, b      []cpioEntry
		wantNames []string
	}{
		{name: "same input", a: withParents(slices.Clone(base)), b: withParents(slices.Clone(base)),
			wantNames: []string{"bin", "bin/busybox", "bin/sh", "dev", "dev/console", "init", "TRAILER!!!"}},
		{name: "input order does not matter", a: withParents(slices.Clone(base), "proc"), b: withParents(reversed, "proc"),
			wantNames: []string{"bin", "bin/busybox", "bin/sh", "dev", "dev/console", "init", "proc", "TRAILER!!!"}},
		{name: "empty", wantNames: []string{"TRAILER!!!"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := build(t, tt.a), build(t, tt.b)
			if !bytes.Equal(a, b) {
				t.Fatal("two builds differ")
			}
			if got := cpioNames(t, a); !slices.Equal(got, tt.wantNames) {
				t.Errorf("names %q, want %q", got, tt.wantNames)
			}
		})
	}
}

func TestWriteInitramfsDuplicate(t *testing.T) {
	e := cpioEntry{Name: "init", Mode: modeFile | 0o755}
	if err := writeInitramfs(io.Discard, []cpioEntry{e, e}); err == nil {
		t.Fatal("duplicate entries accepted")
	}
}

func build(t *testing.T, entries []cpioEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := writeInitramfs(&buf, entries); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// cpioNames decompresses a newc archive, checks its magic, fixed owners and
// mtimes and 4-byte alignment, and returns the entry names in order.
func cpioNames(t *testing.T, gz []byte) []string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	field := func(hdr []byte, i int) int {
		v, err := strconv.ParseUint(string(hdr[6+8*i:14+8*i]), 16, 32)
		if err != nil {
			t.Fatal(err)
		}
		return int(v)
	}
	align := func(n int) int { return (n + 3) &^ 3 }
	var names []string
	for off := 0; off < len(raw); {
		hdr := raw[off : off+110]
		if string(hdr[:6]) != "070701" {
			t.Fatalf("bad magic at %d", off)
		}
		if field(hdr, 2) != 0 || field(hdr, 3) != 0 || field(hdr, 5) != 0 {
			t.Errorf("entry at %d: uid, gid or mtime not 0", off)
		}
		nameLen, size := field(hdr, 11), field(hdr, 6)
		name := string(raw[off+110 : off+110+nameLen-1])
		names = append(names, name)
		off = align(align(off+110+nameLen) + size)
		if name == "TRAILER!!!" {
			break
		}
	}
	return names
}

func TestFindKernel(t *testing.T) {
	tests := []struct {
		name    string
		boot    []string // kernels in /boot
		mods    []string // releases with modules.dep
		running string
		want    string
		wantErr bool
	}{
		{name: "running kernel installed", boot: []string{"6.1.0-1-amd64", "6.1.0-2-amd64"}, mods: []string{"6.1.0-1-amd64", "6.1.0-2-amd64"}, running: "6.1.0-1-amd64", want: "6.1.0-1-amd64"},
		{name: "running kernel foreign", boot: []string{"6.1.0-56-amd64"}, mods: []string{"6.1.0-56-amd64"}, running: "6.18.44-fc", want: "6.1.0-56-amd64"},
		{name: "needs modules", boot: []string{"6.1.0-1-amd64", "6.1.0-2-amd64"}, mods: []string{"6.1.0-1-amd64"}, running: "x", want: "6.1.0-1-amd64"},
		{name: "highest", boot: []string{"6.1.0-1-amd64", "6.1.0-2-amd64"}, mods: []string{"6.1.0-1-amd64", "6.1.0-2-amd64"}, want: "6.1.0-2-amd64"},
		{name: "none", boot: []string{"6.1.0-1-amd64"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			boot, mods := filepath.Join(root, "boot"), filepath.Join(root, "modules")
			for _, r := range tt.boot {
				writeFile(t, filepath.Join(boot, "vmlinuz-"+r))
			}
			for _, r := range tt.mods {
				writeFile(t, filepath.Join(mods, r, "modules.dep"))
			}
			got, err := findKernel(boot, mods, tt.running)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func writeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestQemuArgs(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:12:34:56")
	tests := []struct {
		name  string
		spec  VMSpec
		extra []string
		want  []string // substrings of the joined command line
		not   []string
	}{
		{name: "bios", spec: VMSpec{Name: "a", MAC: mac},
			want: []string{"-accel tcg", "-no-reboot", "-m 512", "-serial file:/c", "ifname=tap0,script=no", "e1000,netdev=n0,mac=52:54:00:12:34:56,bootindex=0"},
			not:  []string{"-bios", "virtio", "-smbios", "tpm"}},
		{name: "asset tag and a TPM", spec: VMSpec{Name: "d", MAC: mac, AssetTag: "vlab-hold"}, extra: []string{"-device", "tpm-tis,tpmdev=tpm0"},
			want: []string{"-smbios type=3,asset=vlab-hold", "-device tpm-tis,tpmdev=tpm0"}},
		{name: "uefi raises memory", spec: VMSpec{Name: "b", MAC: mac, Firmware: UEFI, MemoryMiB: 256},
			want: []string{"-accel tcg", "-m 1024", "-bios " + OVMFPath, "virtio-net-pci,netdev=n0,mac=52:54:00:12:34:56,romfile=,bootindex=0"},
			not:  []string{"e1000"}},
		{name: "uefi more memory", spec: VMSpec{Name: "c", MAC: mac, Firmware: UEFI, MemoryMiB: 2048},
			want: []string{"-m 2048"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(qemuArgs(tt.spec, "tap0", "/c", tt.extra), " ")
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(got, n) {
					t.Errorf("%q has %q", got, n)
				}
			}
		})
	}
}

func TestPrefixMask(t *testing.T) {
	tests := []struct {
		bits int
		want string
	}{{24, "255.255.255.0"}, {16, "255.255.0.0"}, {20, "255.255.240.0"}}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := prefixMask(tt.bits); got != tt.want {
				t.Errorf("prefixMask(%d) = %q, want %q", tt.bits, got, tt.want)
			}
		})
	}
}
