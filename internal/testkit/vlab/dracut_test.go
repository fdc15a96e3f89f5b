package vlab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFindDebs(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"dracut-core_059-3_amd64.deb", "dracut-core_059-4_amd64.deb", "dracut-live_059-4_all.deb", "dracut-core-extra_1_all.deb"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	debs, err := findDebs(dir, []string{"dracut-core", "dracut-live"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "dracut-core_059-4_amd64.deb"), filepath.Join(dir, "dracut-live_059-4_all.deb")}
	if !slices.Equal(debs, want) {
		t.Errorf("findDebs = %v, want %v", debs, want)
	}
	_, err = findDebs(dir, []string{"dracut-core", "dracut-network", "isc-dhcp-client"})
	if err == nil || !strings.Contains(err.Error(), "dracut-network, isc-dhcp-client") || !strings.Contains(err.Error(), "apt-get download dracut-network isc-dhcp-client") {
		t.Errorf("missing packages: err = %v, want both named with the apt-get download to run", err)
	}
}

func TestMergeUsr(t *testing.T) {
	tree := t.TempDir()
	files := map[string]os.FileMode{"sbin/dhclient": 0o755, "lib/udev/rules.d/x.rules": 0o644, "usr/bin/arping": 0o755, "usr/sbin/other": 0o755}
	for f, mode := range files {
		p := filepath.Join(tree, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("dhclient", filepath.Join(tree, "sbin/dhclient-link")); err != nil {
		t.Fatal(err)
	}
	if err := mergeUsr(tree); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"sbin", "lib"} {
		if _, err := os.Lstat(filepath.Join(tree, d)); err == nil {
			t.Errorf("%s is still there after mergeUsr", d)
		}
	}
	for f, mode := range map[string]os.FileMode{"usr/sbin/dhclient": 0o755, "usr/lib/udev/rules.d/x.rules": 0o644, "usr/bin/arping": 0o755, "usr/sbin/other": 0o755} {
		fi, err := os.Stat(filepath.Join(tree, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", f, fi.Mode().Perm(), mode)
		}
	}
	if l, err := os.Readlink(filepath.Join(tree, "usr/sbin/dhclient-link")); err != nil || l != "dhclient" {
		t.Errorf("symlink: %q, %v", l, err)
	}
}

func TestKernelQemuArgs(t *testing.T) {
	args := kernelQemuArgs(KernelVMSpec{Name: "n", MAC: "52:54:00:00:00:01", Kernel: "/k", Initrd: "/i", Append: "root=live:x"}, "tap3", "/c")
	s := strings.Join(args, " ")
	for _, want := range []string{"-accel tcg", "-no-reboot", "-m 512", "-serial file:/c", "-kernel /k", "-initrd /i",
		"ifname=tap3,", "e1000,netdev=n0,mac=52:54:00:00:00:01"} {
		if !strings.Contains(s, want) {
			t.Errorf("qemu args %q lack %q", s, want)
		}
	}
	i := slices.Index(args, "-append")
	if i < 0 || args[i+1] != "console=ttyS0 root=live:x" {
		t.Errorf("-append: %v", args)
	}
	args = kernelQemuArgs(KernelVMSpec{MemoryMiB: 768, Append: "console=ttyS0,115200 quiet"}, "tap0", "/c")
	if i := slices.Index(args, "-append"); args[i+1] != "console=ttyS0,115200 quiet" {
		t.Errorf("console given: -append %q", args[i+1])
	}
	if i := slices.Index(args, "-m"); args[i+1] != "768" {
		t.Errorf("memory: %v", args)
	}
}
