// Command vlab runs bootd in a virtual lab (a network namespace with a bridge and QEMU PCs)
// so a newcomer can watch PCs netboot, wait, get named and boot into their roles.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `Usage: vlab demo [--bootd PATH] [--dir DIR]

Builds a virtual lab in a network namespace (bridge 10.80.0.1/24, bootd on it), powers on three
QEMU PCs (two BIOS, one UEFI) that netboot through bootd, names them master, c1 and c2 with
'bootd assign', and shows each one booting on with its static address and hostname. Needs root,
qemu-system-x86, ovmf, ipxe, busybox-static and a Debian kernel (make deps installs them).
Everything it creates is removed at the end, also on Ctrl-C.
`

func main() {
	if len(os.Args) < 2 || os.Args[1] != "demo" {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage); fs.PrintDefaults() }
	bootd := fs.String("bootd", "bin/bootd", "the bootd binary to run")
	dir := fs.String("dir", "", "keep consoles, logs and state here (default: a temporary directory, removed)")
	_ = fs.Parse(os.Args[2:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo(ctx, *bootd, *dir); err != nil {
		fmt.Fprintf(os.Stderr, "\nvlab demo: %v\n", err)
		os.Exit(1)
	}
}
