package fetchinitrd

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMakeUnpacks: the archive unpacks with the real cpio (as the kernel would unpack it) into
// the program at its path, executable, and is the same for the same program.
func TestMakeUnpacks(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Fatalf("cpio: %v (apt-get install cpio)", err)
	}
	prog := []byte("#!/bin/sh\necho fetch\n")
	a, err := Make(prog)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Make(prog)
	if !bytes.Equal(a, b) {
		t.Error("two archives of the same program differ")
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", "gzip -dc | cpio -idm --quiet")
	cmd.Dir, cmd.Stdin = dir, bytes.NewReader(a)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio: %v: %s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, ProgramPath))
	if err != nil || !bytes.Equal(got, prog) {
		t.Fatalf("unpacked %s: %q, %v", ProgramPath, got, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, ProgramPath)); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", fi.Mode().Perm())
	}
}
