package vlab

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestNodeEtc(t *testing.T) {
	n := NFSNode{Name: "c1", Files: []NFSFile{
		{Path: "/etc/fstab", Mode: 0o644, Data: []byte("fstab")},
		{Path: "/etc/tmpfiles.d/bootd.conf", Mode: 0o644, Data: []byte("d /home")},
	}}
	got, err := nodeEtc(n)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]NFSFile{}
	for _, f := range got {
		byPath[f.Path] = f
	}
	if f := byPath["/etc/netns/c1/fstab"]; string(f.Data) != "fstab" {
		t.Errorf("c1's fstab not under /etc/netns/c1: %+v", got)
	}
	if _, ok := byPath["/etc/netns/c1/tmpfiles.d/bootd.conf"]; !ok {
		t.Errorf("c1's tmpfiles.d file not under /etc/netns/c1: %+v", got)
	}
	// ip netns exec binds only over what exists: a file and a directory to cover.
	if f, ok := byPath["/etc/fstab"]; !ok || f.Mode.IsDir() || len(f.Data) != 0 {
		t.Errorf("no empty /etc/fstab placeholder: %+v", got)
	}
	if f, ok := byPath["/etc/tmpfiles.d"]; !ok || !f.Mode.IsDir() {
		t.Errorf("no /etc/tmpfiles.d directory placeholder: %+v", got)
	}

	for _, bad := range []NFSNode{
		{Name: "c1", Files: []NFSFile{{Path: "/root/.ssh/id_ed25519"}}},
		{Name: "a/b", Files: []NFSFile{{Path: "/etc/hosts"}}},
		{Name: "", Files: []NFSFile{{Path: "/etc/hosts"}}},
	} {
		if _, err := nodeEtc(bad); err == nil {
			t.Errorf("nodeEtc(%+v) accepted", bad)
		}
	}
}

func TestAddFiles(t *testing.T) {
	entries := []cpioEntry{{Name: "etc/hosts", Mode: modeFile | 0o644, Data: []byte("first")}}
	got, err := addFiles(entries, []NFSFile{
		{Path: "/etc/hosts", Mode: 0o644}, // a placeholder of another node: the first stays
		{Path: "/etc/tmpfiles.d", Mode: fs.ModeDir | 0o755},
		{Path: "/etc/tmpfiles.d", Mode: fs.ModeDir | 0o755},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got[0].Data) != "first" || got[1].Mode != modeDir|0o755 {
		t.Errorf("addFiles = %+v", got)
	}
	if _, err := addFiles(entries, []NFSFile{{Path: "/etc/hosts", Mode: fs.ModeDir | 0o755}}); err == nil {
		t.Error("a path given as file and directory accepted")
	}
}

func TestNFSQemuArgs(t *testing.T) {
	got := strings.Join(nfsQemuArgs(NFSVMSpec{ImageDir: "/img", Console: "/c", Disk: "/d.img"}), " ")
	// No network device at all: QEMU's default NIC would be user-mode networking with a way out.
	for _, w := range []string{"-accel tcg", "-nic none", "-no-reboot", "-m 512", "-serial file:/c", "-kernel /img/vmlinuz",
		"-initrd /img/initramfs.img", "panic=-1", "-drive file=/d.img,format=raw,if=virtio"} {
		if !strings.Contains(got, w) {
			t.Errorf("%q lacks %q", got, w)
		}
	}
	if got := strings.Join(nfsQemuArgs(NFSVMSpec{ImageDir: "/img", Console: "/c", MemoryMiB: 768}), " "); strings.Contains(got, "-drive") || !strings.Contains(got, "-m 768") {
		t.Errorf("no disk, 768 MiB: %q", got)
	}
}

// The build machines have every host file the NFS image copies (scripts/setup-debian.sh); a
// missing one is named with the package that brings it.
func TestNFSHostFiles(t *testing.T) {
	dir := t.TempDir()
	present, missing := filepath.Join(dir, "bash"), filepath.Join(dir, "mount.nfs")
	if err := os.WriteFile(present, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		files   []hostFile
		wantErr string
	}{
		{"this host, as set up", nfsHostFiles(), ""},
		{"one missing", []hostFile{{present, "bash"}, {missing, "nfs-common"}}, "vlab: the NFS image needs " + missing + " (apt-get install nfs-common)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkNFSHost(tc.files)
			if (err == nil) != (tc.wantErr == "") || (err != nil && err.Error() != tc.wantErr) {
				t.Errorf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// programEntries carries a program with the libraries and loader it needs, each once, in order.
func TestProgramEntries(t *testing.T) {
	entries, err := programEntries([]hostFile{{"/usr/bin/bash", "bash"}, {"/usr/sbin/ip", "iproute2"}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
		if e.Mode != modeFile|0o755 || len(e.Data) == 0 {
			t.Errorf("%s: mode %o, %d bytes", e.Name, e.Mode, len(e.Data))
		}
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("entries not sorted or not unique: %v", names)
	}
	for _, want := range []string{"usr/bin/bash", "usr/sbin/ip"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s missing from %v", want, names)
		}
	}
	var libc, loader bool
	for _, n := range names {
		libc = libc || strings.Contains(n, "/libc.so")
		loader = loader || strings.Contains(n, "/ld-linux")
	}
	if !libc || !loader {
		t.Errorf("no libc or no loader among %v", names)
	}
}
