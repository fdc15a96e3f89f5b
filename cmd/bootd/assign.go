package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/labcluster/gpucluster/internal/cli"
	"github.com/labcluster/gpucluster/internal/ctl"
)

const assignHelp = `Usage: bootd assign NAME [--mac MAC] [--replace] [--ek FILE]

Names a machine that netbooted and waits: NAME is "master" or cN (c1, c2, ...). The name gives
the role (master or compute) and the static address (reference lab: master 10.80.0.100, cN
10.80.0.(100+N)). The machine boots on into its role at its next poll, without a power cycle;
from then on DHCP gives its MAC that address and hostname. When no version of the role's image
verifies in bootd's images directory yet, assign says so: the machine waits at its boot screen
until one does (build it with imgbuild).

With one machine waiting, --mac is not needed. With several, bootd lists them (MAC, model,
serial, first seen) and asks for --mac.

Replacing hardware: when a node's PC (or its motherboard, and so its MAC) is replaced, netboot
the new one so it waits, then move the name to it:
    bootd assign c4 --mac <new MAC> --replace
c4 keeps its address and role; the old MAC, which assign names, is forgotten: netbooted again,
that machine waits to be named.

TPM: a node with a TPM 2.0 presents its endorsement key (EK) when it fetches its files at boot;
bootd records the first one after the assign and from then on sends the node's secrets sealed
to that TPM alone, refusing any other (bootd nodes shows its fingerprint). To trust no first
boot, give the key yourself with --ek FILE: a PEM public key (tpm2_createek -G rsa -f pem -u
ek.pem -c ek.ctx, run on that PC), or its EK certificate (PEM or DER), or tpm2_createek's
default output. For a node already assigned, bootd assign c4 --ek FILE replaces the key on
record (a new TPM or motherboard). A node without a TPM keeps the weaker checks (its MAC and
address: see SECURITY.md).
`

func runAssign(args []string) error {
	fs := cli.NewFlagSet("assign", assignHelp)
	var cf clientFlags
	cf.register(fs)
	mac := fs.String("mac", "", "MAC of the waiting machine (needed when several wait)")
	replace := fs.Bool("replace", false, "move NAME to this machine even though NAME is already bound (replaced hardware)")
	ekFile := fs.String("ek", "", "the machine's TPM endorsement key (PEM public key or EK certificate): pinned instead of recorded at first boot")
	rest, err := cli.ParseInterleaved(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(rest) != 1 {
		return fmt.Errorf("%w: want exactly one NAME: bootd assign NAME [--mac MAC] [--replace] [--ek FILE]", errUsage)
	}
	req := ctl.AssignRequest{Name: rest[0], MAC: *mac, Replace: *replace}
	if *ekFile != "" {
		if req.EK, err = readEKFile(*ekFile); err != nil {
			return err
		}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	n, err := c.Assign(req)
	var ce *ctl.Error
	if errors.As(err, &ce) && len(ce.Waiting) > 0 {
		fmt.Fprintf(os.Stderr, "bootd assign: %d machines are waiting; say which one is %s with --mac:\n\n", len(ce.Waiting), rest[0])
		printWaiting(os.Stderr, ce.Waiting, time.Now())
		fmt.Fprintf(os.Stderr, "\ne.g.  bootd assign %s --mac %s\n", rest[0], ce.Waiting[0].MAC)
		os.Exit(1)
	}
	if err != nil {
		if *ekFile != "" && strings.Contains(err.Error(), "TPM endorsement key") {
			return fmt.Errorf("--ek %s: %w", *ekFile, err)
		}
		return err
	}
	printAssigned(os.Stdout, n)
	return nil
}

// maxEKFile bounds what --ek reads: a certificate chain is a few KiB.
const maxEKFile = 64 << 10

// readEKFile reads --ek's file; the daemon parses it (one parser, one set of errors).
func readEKFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--ek: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxEKFile+1))
	if err != nil {
		return nil, fmt.Errorf("--ek %s: %w", path, err)
	}
	if len(b) > maxEKFile {
		return nil, fmt.Errorf("--ek %s: larger than %d KiB: not an endorsement key or certificate", path, maxEKFile>>10)
	}
	return b, nil
}

// printAssigned says what the node is now, which machine it replaced, and what it boots.
func printAssigned(w io.Writer, r ctl.AssignReply) {
	fmt.Fprintf(w, "%s is %s: %s, address %s; ", r.MAC, r.Name, r.Role, r.Address)
	if r.Replaced != "" {
		fmt.Fprintf(w, "it replaces %s, which bootd forgot (netbooted again, that machine waits to be named); ", r.Replaced)
	}
	if r.TPM != nil && r.TPM.Pinned {
		fmt.Fprintf(w, "its TPM endorsement key is %s (pinned); ", r.TPM.EKSHA256)
	}
	switch img := r.Image; {
	case img.Name == "": // a daemon older than this command: it does not say
		fmt.Fprintf(w, "it boots into its role at its next poll or boot\n")
	case img.Version != "":
		fmt.Fprintf(w, "it boots %s %s at its next poll or boot\n", img.Name, img.Version)
	case img.Verifying:
		what := "the newest version of image " + img.Name
		if img.Pinned != "" {
			what = "image " + img.Name + " " + img.Pinned
		}
		fmt.Fprintf(w, "bootd is still verifying %s in %s (hashing a large new version takes a while); it boots it at its next poll or boot once it verifies (bootd logs \"image version verified\", or why it refused it)\n", what, img.Dir)
	default:
		printNoImage(w, r.Role, img)
	}
}

// printNoImage explains a node whose role has no bootable image: it waits at its boot screen,
// asking again every few seconds, until one verifies in bootd's images directory.
func printNoImage(w io.Writer, role string, img ctl.BootImage) {
	if img.Pinned != "" {
		fmt.Fprintf(w, "but version %s of image %q, which bootd's config pins, does not verify in %s, where bootd looks:\n", img.Pinned, img.Name, img.Dir)
		fmt.Fprintf(w, "it waits at its boot screen, asking again every few seconds, until it does (bootd: %s).\n", img.Problem)
		fmt.Fprintf(w, "Build it with imgbuild, or unpin it (%s.version in bootd's config) and restart bootd:\n", role)
		fmt.Fprintf(w, "    imgbuild build images/%s.toml --version %s --out %s\n", img.Name, img.Pinned, img.Dir)
		return
	}
	fmt.Fprintf(w, "but no version of image %q verifies yet in %s, where bootd looks:\n", img.Name, img.Dir)
	fmt.Fprintf(w, "it waits at its boot screen, asking again every few seconds, until one does (bootd: %s).\n", img.Problem)
	fmt.Fprintf(w, "Build one with imgbuild (after  imgbuild lock images/%s.toml  if it has no lock yet):\n", img.Name)
	fmt.Fprintf(w, "    imgbuild build images/%s.toml --out %s\n", img.Name, img.Dir)
}
