package sandbox

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// TestKeyringProgram runs the filter in x/net/bpf's interpreter on made-up struct seccomp_data
// (the interpreter loads big-endian words, so the data is written that way).
func TestKeyringProgram(t *testing.T) {
	const allow, eperm = seccompRetAllow, seccompRetErrno | int(unix.EPERM)
	for _, goarch := range []string{"amd64", "arm64"} {
		prog, err := keyringProgram(goarch)
		if err != nil {
			t.Fatal(err)
		}
		vm, err := bpf.NewVM(prog)
		if err != nil {
			t.Fatalf("%s: %v", goarch, err)
		}
		var cases []struct {
			name     string
			arch, nr uint32
			want     int
		}
		add := func(name string, arch, nr uint32, want int) {
			cases = append(cases, struct {
				name     string
				arch, nr uint32
				want     int
			}{name, arch, nr, want})
		}
		for _, s := range keyCallsByGOARCH[goarch] {
			add("add_key", s.arch, s.addKey, eperm)
			add("request_key", s.arch, s.requestKey, eperm)
			add("keyctl", s.arch, s.keyctl, eperm)
			add("a neighbour", s.arch, s.keyctl+1, allow)
			add("read", s.arch, 0, allow)
		}
		add("x32 keyctl", unix.AUDIT_ARCH_X86_64, 250|x32Bit, map[string]int{"amd64": eperm, "arm64": allow}[goarch])
		add("another architecture's keyctl number", 0x1234, 250, allow)
		for _, c := range cases {
			t.Run(goarch+"/"+c.name, func(t *testing.T) {
				data := make([]byte, 64)
				binary.BigEndian.PutUint32(data[offNr:], c.nr)
				binary.BigEndian.PutUint32(data[offArch:], c.arch)
				got, err := vm.Run(data)
				if err != nil || got != c.want {
					t.Errorf("arch %#x nr %d: %#x, %v; want %#x", c.arch, c.nr, got, err, c.want)
				}
			})
		}
	}
	if _, err := keyringProgram("riscv64"); err == nil {
		t.Error("riscv64: a filter without its call numbers")
	}
}
