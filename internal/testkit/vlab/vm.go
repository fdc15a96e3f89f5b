package vlab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/swtpm"
)

// Firmware is the boot firmware of a VM.
type Firmware int

const (
	// BIOS is SeaBIOS; its e1000 option ROM is iPXE, so the first DHCP
	// request already carries user class "iPXE".
	BIOS Firmware = iota
	// UEFI is OVMF with a virtio NIC without option ROM: OVMF's own
	// VirtioNetDxe and PXE stack boot, so the VM fetches ipxe.efi over TFTP
	// with DHCP option 93 = 7 before iPXE takes over.
	UEFI
	// UEFISecureBoot is UEFI with Secure Boot on and Microsoft's keys enrolled (Debian's
	// OVMF_CODE_4M.secboot.fd and OVMF_VARS_4M.ms.fd, on q35 with SMM): it fetches ipxe.efi like
	// UEFI, and refuses to run the unsigned binary, as a lab PC with Secure Boot on does.
	UEFISecureBoot
)

func (f Firmware) String() string {
	switch f {
	case BIOS:
		return "bios"
	case UEFI:
		return "uefi"
	case UEFISecureBoot:
		return "uefi-secureboot"
	}
	return fmt.Sprintf("firmware(%d)", int(f))
}

// OVMFPath is the UEFI firmware image used for UEFI VMs.
var OVMFPath = "/usr/share/ovmf/OVMF.fd"

// Secure Boot firmware (Debian's ovmf): the code with Secure Boot support, and the variable store
// with Secure Boot on and Microsoft's keys, copied per VM (the firmware writes to it).
var (
	OVMFSecureBootCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	OVMFSecureBootVars = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
)

// minUEFIMemoryMiB is the least memory OVMF's PXE boot works with reliably.
const minUEFIMemoryMiB = 1024

// pollInterval is how often console files are read.
const pollInterval = 100 * time.Millisecond

// VMSpec describes a PC of the lab.
type VMSpec struct {
	Name      string // file names and logs; also the default console name
	MAC       net.HardwareAddr
	Firmware  Firmware
	MemoryMiB int // 0: 512 for BIOS, 1024 for UEFI
	// TPMDir, when set, gives the PC a TPM 2.0 (swtpm, a TIS device as most PCs have) whose state
	// lives there: the same directory is the same TPM, endorsement key and all.
	TPMDir string
	// AssetTag is the chassis asset tag the firmware reports (SMBIOS type 3), "" for QEMU's.
	AssetTag string
}

// VM is a running QEMU PC attached to the lab's bridge.
type VM struct {
	Spec        VMSpec
	Tap         string    // tap device on the bridge
	ConsolePath string    // serial console (ttyS0) output
	Started     time.Time // just before QEMU was started
	Args        []string  // the QEMU command line

	proc *Process
	tpm  *swtpm.TPM // the PC's TPM, nil for none
}

// StartVM creates a tap device on the bridge and starts QEMU inside the
// namespace, network-booting first. The serial console goes to
// <dir>/<name>.console and QEMU's own output to <dir>/<name>.qemu.log.
// Cancelling ctx kills the VM.
func (l *Lab) StartVM(ctx context.Context, spec VMSpec, dir string) (*VM, error) {
	if spec.Name == "" || len(spec.MAC) != 6 {
		return nil, fmt.Errorf("vlab: vm spec needs a name and a 6-byte MAC: %+v", spec)
	}
	if spec.Firmware == UEFISecureBoot {
		vars, err := os.ReadFile(OVMFSecureBootVars)
		if err != nil {
			return nil, fmt.Errorf("vlab: Secure Boot variables (apt-get install ovmf): %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, spec.Name+".vars.fd"), vars, 0o644); err != nil {
			return nil, err
		}
	}
	if spec.TPMDir == "" {
		return l.startQEMU(ctx, spec, dir, func(tap, console string) []string { return qemuArgs(spec, tap, console, nil) })
	}
	// A short socket path: unix socket names are limited to 108 bytes, test directories are long.
	sockDir, err := os.MkdirTemp("", "vtpm")
	if err != nil {
		return nil, err
	}
	tpm, err := swtpm.StartForQEMU(ctx, spec.TPMDir, filepath.Join(sockDir, "sock"))
	if err != nil {
		os.RemoveAll(sockDir)
		return nil, fmt.Errorf("vlab: vm %s: %w", spec.Name, err)
	}
	vm, err := l.startQEMU(ctx, spec, dir, func(tap, console string) []string { return qemuArgs(spec, tap, console, tpm.QEMUArgs()) })
	if err != nil {
		tpm.Close()
		os.RemoveAll(sockDir)
		return nil, err
	}
	vm.tpm = tpm
	go func() { // the TPM goes with its PC
		_ = vm.proc.Wait(context.Background())
		tpm.Close()
		os.RemoveAll(sockDir)
	}()
	return vm, nil
}

// startQEMU creates a tap on the bridge and a fresh console file, so WaitConsole never matches an
// old boot, then starts QEMU in the namespace with the command line args makes from them.
func (l *Lab) startQEMU(ctx context.Context, spec VMSpec, dir string, args func(tap, console string) []string) (*VM, error) {
	tap, err := l.addTap(ctx)
	if err != nil {
		return nil, err
	}
	vm := &VM{Spec: spec, Tap: tap, ConsolePath: filepath.Join(dir, spec.Name+".console")}
	if err := os.WriteFile(vm.ConsolePath, nil, 0o644); err != nil {
		return nil, fmt.Errorf("vlab: create console: %w", err)
	}
	vm.Args = args(tap, vm.ConsolePath)
	vm.Started = time.Now()
	vm.proc, err = l.Start(ctx, filepath.Join(dir, spec.Name+".qemu.log"), "qemu-system-x86_64", vm.Args...)
	if err != nil {
		return nil, fmt.Errorf("vlab: start vm %s: %w", spec.Name, err)
	}
	return vm, nil
}

// baseQemuArgs starts every lab PC's QEMU command line: software emulation, no display, no
// reboot (a reboot ends QEMU), one CPU, mem MiB (0: 512), no monitor, the serial console to a file.
func baseQemuArgs(mem int, console string) []string {
	if mem == 0 {
		mem = 512
	}
	return []string{
		"-accel", "tcg", "-nographic", "-no-reboot",
		"-m", fmt.Sprint(mem), "-smp", "1",
		"-monitor", "none", "-serial", "file:" + console,
	}
}

// addTap creates the next tap<N> in the namespace, enslaved to the bridge.
func (l *Lab) addTap(ctx context.Context) (string, error) {
	l.mu.Lock()
	tap := fmt.Sprintf("tap%d", l.nextTap)
	l.nextTap++
	l.taps = append(l.taps, tap)
	l.mu.Unlock()
	steps := [][]string{
		{"ip", "tuntap", "add", tap, "mode", "tap"},
		{"ip", "link", "set", tap, "master", l.Bridge},
		{"ip", "link", "set", tap, "up"},
	}
	for _, s := range steps {
		if err := l.run(ctx, s...); err != nil {
			return "", fmt.Errorf("vlab: create %s: %w", tap, err)
		}
	}
	return tap, nil
}

// qemuArgs is the QEMU command line of a VM: baseQemuArgs, and the NIC as the first (only) boot
// device; then the extra devices (a TPM) and the asset tag, if any.
func qemuArgs(spec VMSpec, tap, console string, extra []string) []string {
	mem := spec.MemoryMiB
	nic := fmt.Sprintf("e1000,netdev=n0,mac=%s,bootindex=0", spec.MAC)
	var fw []string
	switch spec.Firmware {
	case UEFI:
		mem = max(mem, minUEFIMemoryMiB)
		// romfile= drops iPXE's option ROM so OVMF's native PXE boots.
		nic = fmt.Sprintf("virtio-net-pci,netdev=n0,mac=%s,romfile=,bootindex=0", spec.MAC)
		fw = []string{"-bios", OVMFPath}
	case UEFISecureBoot:
		mem = max(mem, minUEFIMemoryMiB)
		nic = fmt.Sprintf("virtio-net-pci,netdev=n0,mac=%s,romfile=,bootindex=0", spec.MAC)
		// The variable store StartVM copied next to the console.
		vars := filepath.Join(filepath.Dir(console), spec.Name+".vars.fd")
		fw = []string{"-machine", "q35,smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on",
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + OVMFSecureBootCode,
			"-drive", "if=pflash,format=raw,unit=1,file=" + vars}
	}
	args := append(baseQemuArgs(mem, console), fw...)
	args = append(args,
		"-netdev", fmt.Sprintf("tap,id=n0,ifname=%s,script=no,downscript=no", tap),
		"-device", nic,
	)
	if spec.AssetTag != "" {
		args = append(args, "-smbios", "type=3,asset="+spec.AssetTag)
	}
	return append(args, extra...)
}

// Console returns the serial console output so far.
func (vm *VM) Console() string {
	b, _ := os.ReadFile(vm.ConsolePath)
	return string(b)
}

// WaitConsole polls the console until re matches whole lines and returns the submatches: a line
// the VM is still writing is not read until its newline (or QEMU's exit), so `(.*)` never
// captures half of one. It fails when ctx ends or QEMU exits without a match; the error carries
// the console's last lines.
func (vm *VM) WaitConsole(ctx context.Context, re *regexp.Regexp) ([]string, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		exited := vm.proc.Exited() // before reading: no output is lost after exit
		console := vm.Console()
		if !exited {
			console = console[:strings.LastIndexByte(console, '\n')+1]
		}
		if m := re.FindStringSubmatch(console); m != nil {
			return m, nil
		}
		if exited {
			return nil, fmt.Errorf("vlab: %s exited before console matched %q; console tail:\n%s", vm.Spec.Name, re, vm.ConsoleTail(25))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("vlab: %s: console did not match %q: %w; console tail:\n%s", vm.Spec.Name, re, ctx.Err(), vm.ConsoleTail(25))
		case <-t.C:
		}
	}
}

// ConsoleTail returns the last n lines of the console, without carriage returns.
func (vm *VM) ConsoleTail(n int) string {
	return LastLines(strings.ReplaceAll(vm.Console(), "\r", ""), n)
}

// Wait waits until QEMU exits (the test image powers off, and -no-reboot
// turns any reboot into an exit) or ctx ends.
func (vm *VM) Wait(ctx context.Context) error {
	err := vm.proc.Wait(ctx)
	if errors.Is(err, ctx.Err()) && ctx.Err() != nil {
		return fmt.Errorf("vlab: %s still running: %w", vm.Spec.Name, err)
	}
	if err != nil {
		return fmt.Errorf("vlab: %s: qemu: %w", vm.Spec.Name, err)
	}
	return nil
}

// Kill stops the VM at once.
func (vm *VM) Kill() { vm.proc.Kill() }

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// KernelVMSpec is a PC of the lab booted straight into a kernel and initramfs (QEMU -kernel,
// -initrd, -append): no firmware network boot.
type KernelVMSpec struct {
	Name      string
	MAC       string // e.g. 52:54:00:12:34:56
	MemoryMiB int    // 0: 512
	Kernel    string
	Initrd    string
	Append    string // the kernel command line; console=ttyS0 is added when missing
	Disks     []Disk // virtio disks, in order
}

// Disk is a raw disk image a kernel VM sees as a virtio disk with the given serial number.
type Disk struct {
	File, Serial string
}

// StartKernelVM starts a BIOS PC with an e1000 NIC on the lab's bridge that boots spec.Kernel
// directly. The console goes to <dir>/<name>.console, QEMU's output to <dir>/<name>.qemu.log;
// -no-reboot turns a reboot (or a kernel panic with panic=-1) into QEMU exiting. Cancelling ctx
// or closing the lab kills it.
func (l *Lab) StartKernelVM(ctx context.Context, spec KernelVMSpec, dir string) (*VM, error) {
	mac, err := net.ParseMAC(spec.MAC)
	if err != nil || spec.Name == "" || spec.Kernel == "" || spec.Initrd == "" {
		return nil, fmt.Errorf("vlab: kernel vm spec needs a name, a MAC, a kernel and an initrd: %+v", spec)
	}
	vmSpec := VMSpec{Name: spec.Name, MAC: mac, Firmware: BIOS, MemoryMiB: spec.MemoryMiB}
	return l.startQEMU(ctx, vmSpec, dir, func(tap, console string) []string { return kernelQemuArgs(spec, tap, console) })
}

func kernelQemuArgs(spec KernelVMSpec, tap, console string) []string {
	cmdline := spec.Append
	if !strings.Contains(" "+cmdline+" ", " console=ttyS0") {
		cmdline = strings.TrimSpace("console=ttyS0 " + cmdline)
	}
	args := append(baseQemuArgs(spec.MemoryMiB, console),
		"-kernel", spec.Kernel, "-initrd", spec.Initrd, "-append", cmdline,
		"-netdev", fmt.Sprintf("tap,id=n0,ifname=%s,script=no,downscript=no", tap),
		"-device", fmt.Sprintf("e1000,netdev=n0,mac=%s", spec.MAC),
	)
	for i, d := range spec.Disks {
		args = append(args, "-drive", fmt.Sprintf("file=%s,if=none,id=d%d,format=raw", d.File, i),
			"-device", fmt.Sprintf("virtio-blk-pci,drive=d%d,serial=%s", i, d.Serial))
	}
	return args
}

// ConsoleLines returns the console lines that contain substr, without carriage returns.
func (vm *VM) ConsoleLines(substr string) []string {
	var out []string
	for _, line := range bytes.Split([]byte(vm.Console()), []byte("\n")) {
		s := strings.TrimRight(string(line), "\r")
		if strings.Contains(s, substr) {
			out = append(out, s)
		}
	}
	return out
}
