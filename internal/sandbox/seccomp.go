package sandbox

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Keyrings belong to user ids, not to any namespace: without a filter, root in the sandbox
// could read and change the keys of root on the build host (keyctl on the user keyring). The
// filter makes the three key management calls fail with EPERM, as they do under Docker's
// default profile; everything else is allowed (the namespaces and capabilities confine it).

// keyCalls are the numbers of add_key, request_key and keyctl under one audit architecture.
type keyCalls struct {
	arch                       uint32
	addKey, requestKey, keyctl uint32
}

// keyCallsByGOARCH covers the native and the compatibility (32-bit) calls of each host; x32
// calls on amd64 are the native numbers with bit 30 set, which the filter masks off.
var keyCallsByGOARCH = map[string][]keyCalls{
	"amd64": {{unix.AUDIT_ARCH_X86_64, 248, 249, 250}, {unix.AUDIT_ARCH_I386, 286, 287, 288}},
	"arm64": {{unix.AUDIT_ARCH_AARCH64, 217, 218, 219}, {unix.AUDIT_ARCH_ARM, 309, 310, 311}},
}

const (
	seccompRetAllow = 0x7fff0000
	seccompRetErrno = 0x00050000
	x32Bit          = 0x40000000
	offNr, offArch  = 0, 4 // struct seccomp_data
)

// keyringProgram is the filter as classic BPF: per architecture, a block that answers EPERM
// for a key management call of that architecture and allows every other call; a call of an
// architecture the host does not run passes.
func keyringProgram(goarch string) ([]bpf.Instruction, error) {
	sets, ok := keyCallsByGOARCH[goarch]
	if !ok {
		return nil, fmt.Errorf("sandbox: no system call filter for %s hosts (amd64 and arm64 have one)", goarch)
	}
	const block = 8 // instructions per architecture, below
	deny := block*len(sets) + 1
	var prog []bpf.Instruction
	for i, s := range sets {
		toDeny := func(j int) uint8 { return uint8(deny - (block*i + j) - 1) }
		prog = append(prog,
			bpf.LoadAbsolute{Off: offArch, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: s.arch, SkipTrue: block - 2}, // to the next block
			bpf.LoadAbsolute{Off: offNr, Size: 4},
			bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: ^uint32(x32Bit)},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: s.addKey, SkipTrue: toDeny(4)},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: s.requestKey, SkipTrue: toDeny(5)},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: s.keyctl, SkipTrue: toDeny(6)},
			bpf.RetConstant{Val: seccompRetAllow},
		)
	}
	return append(prog, bpf.RetConstant{Val: seccompRetAllow}, bpf.RetConstant{Val: seccompRetErrno | uint32(unix.EPERM)}), nil
}

// keyringFilter returns the filter, compiled for this host, in a memory file for bubblewrap's
// --seccomp (which reads struct sock_filter records).
func keyringFilter() (*os.File, error) {
	prog, err := keyringProgram(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("sandbox: system call filter: %w", err)
	}
	var b bytes.Buffer
	for _, r := range raw {
		_ = binary.Write(&b, binary.NativeEndian, struct {
			Code   uint16
			Jt, Jf uint8
			K      uint32
		}{r.Op, r.Jt, r.Jf, r.K})
	}
	fd, err := unix.MemfdCreate("imgbuild-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("sandbox: system call filter: %w", err)
	}
	f := os.NewFile(uintptr(fd), "imgbuild-seccomp")
	if _, err := f.Write(b.Bytes()); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: system call filter: %w", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
