package ldd

import (
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const vdso = "\tlinux-vdso.so.1 (0x00007ffd1b5e2000)\n"
	const libs = "\tlibtirpc.so.3 => /lib/x86_64-linux-gnu/libtirpc.so.3 (0x00007f61a4f56000)\n" +
		"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f61a4d11000)\n" +
		"\t/lib64/ld-linux-x86-64.so.2 (0x00007f61a4fbc000)\n"
	want := []string{"/lib/x86_64-linux-gnu/libtirpc.so.3", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	for _, tc := range []struct {
		name        string
		out         string
		wantPaths   []string
		wantMissing []string
	}{
		{"libraries and loader", vdso + libs, want, nil},
		{"a library not found", vdso + libs + "\tlibgone.so.1 => not found\n", want, []string{"libgone.so.1"}},
		{"static program", "\tnot a dynamic executable\n", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			paths, missing := Parse(tc.out)
			if !slices.Equal(paths, tc.wantPaths) || !slices.Equal(missing, tc.wantMissing) {
				t.Errorf("Parse = %q, %q; want %q, %q", paths, missing, tc.wantPaths, tc.wantMissing)
			}
		})
	}
}

// TestNeedsRealLdd runs the host's ldd on /bin/sh: libc at least.
func TestNeedsRealLdd(t *testing.T) {
	paths, err := Needs("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(paths, func(p string) bool { return strings.Contains(p, "libc.so") }) {
		t.Errorf("Needs(/bin/sh) = %q, want libc among them", paths)
	}
	if _, err := Needs("/nonexistent/program"); err == nil {
		t.Error("Needs(a missing program) succeeded")
	}
}
