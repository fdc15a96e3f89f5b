//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// TestSecrets: a machine on the segment netboots as a PXE client, waits, is assigned c1, and
// fetches its overlay with its secrets (munge key, SSH host keys) from its address, a
// privileged port and its MAC. Everyone else asking for c1's files is refused: c1's own
// unprivileged processes, another host at its own address, another host that takes c1's
// address. Nothing secret reaches bootd's log.
func TestSecrets(t *testing.T) {
	requirePrereqs(t, "ip", "busybox", "curl", "tar")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := artifactDir(t)
	lab := newLab(ctx, t, "sec", "10.80.0.1/24")
	b := startBootd(ctx, t, lab, dir)
	defer logTailOnFailure(t, b.Proc.LogPath)
	script := udhcpcScript(t, dir)

	c1, err := lab.AddHost(ctx, "c1", mustMAC("52:54:00:5e:c0:01"))
	if err != nil {
		t.Fatal(err)
	}
	if lease := dhcp(ctx, t, c1, script); !strings.HasPrefix(lease, "10.80.0.2") {
		t.Fatalf("c1's discovery lease %s, want one from the pool", lease)
	}
	if out, err := c1.Run(ctx, "curl", "-fsS", "http://10.80.0.1/ipxe/machine?mac=52-54-00-5e-c0-01"); err != nil || !strings.Contains(out, "waiting to be named") {
		t.Fatalf("c1's boot script: %v\n%s", err, out)
	}
	if out, err := b.CLI(ctx, "assign", "c1"); err != nil {
		t.Fatalf("assign c1: %v\n%s", err, out)
	}
	if lease := dhcp(ctx, t, c1, script); lease != "10.80.0.101" {
		t.Fatalf("c1's address after assign %s, want its reservation 10.80.0.101", lease)
	}

	var tarball []byte
	t.Run("c1 gets its own files, secrets included", func(t *testing.T) {
		tarball = overlayAs(ctx, t, c1, true, 200)
		list := tarList(t, tarball)
		for _, want := range []string{"./etc/munge/munge.key", "./etc/ssh/ssh_host_ed25519_key", "./etc/hostname"} {
			if !strings.Contains(list, want) {
				t.Errorf("c1's overlay lacks %s:\n%s", want, list)
			}
		}
	})
	t.Run("a process of c1 on an unprivileged port is refused", func(t *testing.T) { overlayAs(ctx, t, c1, false, 403) })

	evil, err := lab.AddHost(ctx, "evil", mustMAC("52:54:00:5e:c0:66"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("another host at its own address is refused", func(t *testing.T) {
		dhcp(ctx, t, evil, script)
		overlayAs(ctx, t, evil, true, 403)
	})
	t.Run("another host that takes c1's address is refused", func(t *testing.T) {
		if out, err := c1.Run(ctx, "ip", "link", "set", "eth0", "down"); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		setAddr(ctx, t, evil, "10.80.0.101/24")
		// Announce the address the way any host taking it would (gratuitous ARP).
		if out, err := evil.Run(ctx, "busybox", "arping", "-U", "-c", "2", "-I", "eth0", "-s", "10.80.0.101", "10.80.0.1"); err != nil {
			t.Logf("arping: %v %s", err, out)
		}
		overlayAs(ctx, t, evil, true, 403)
	})
	t.Run("nothing secret in bootd's log", func(t *testing.T) { noSecretsLogged(t, b.Proc.LogPath, tarball) })
}

// udhcpcScript writes the script busybox udhcpc runs on a lease: it prints the address.
func udhcpcScript(t *testing.T, dir string) string {
	path := filepath.Join(dir, "udhcpc.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n[ \"$1\" = bound ] && echo \"LEASE $ip\"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// dhcp runs a PXE client's DHCP exchange on h (vendor class PXEClient, as a BIOS ROM sends)
// and configures the leased address.
func dhcp(ctx context.Context, t *testing.T, h *vlab.Host, script string) string {
	t.Helper()
	out, err := h.Run(ctx, "busybox", "udhcpc", "-i", "eth0", "-n", "-q", "-t", "5", "-T", "1", "-V", "PXEClient:Arch:00000:UNDI:002001", "-s", script)
	m := regexp.MustCompile(`LEASE (\S+)`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("dhcp on %s: %v\n%s", h.Name, err, out)
	}
	setAddr(ctx, t, h, m[1]+"/24")
	return m[1]
}

func setAddr(ctx context.Context, t *testing.T, h *vlab.Host, prefix string) {
	t.Helper()
	for _, args := range [][]string{{"addr", "flush", "dev", "eth0"}, {"addr", "add", prefix, "dev", "eth0"}} {
		if out, err := h.Run(ctx, "ip", args...); err != nil {
			t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
}

// overlayAs asks bootd for the overlay from h, from a privileged port or not, and checks the
// HTTP status. It returns the body.
func overlayAs(ctx context.Context, t *testing.T, h *vlab.Host, privileged bool, wantStatus int) []byte {
	t.Helper()
	// The first overlay of a cluster makes the host keys of every node it lists (ssh-keygen, RSA
	// among them): over 20 s on a loaded test machine.
	args := []string{"-sS", "--max-time", "90", "-o", "-", "-w", "\n%{http_code}"}
	if privileged {
		args = append(args, "--local-port", "600-1023")
	}
	out, err := h.Command(ctx, "curl", append(args, "http://10.80.0.1/api/v1/node/overlay")...).Output()
	if err != nil {
		t.Fatalf("curl from %s: %v", h.Name, err)
	}
	i := bytes.LastIndexByte(out, '\n')
	body, status := out[:i], strings.TrimSpace(string(out[i+1:]))
	if status != fmt.Sprint(wantStatus) {
		t.Fatalf("overlay from %s (privileged port %v): HTTP %s, want %d", h.Name, privileged, status, wantStatus)
	}
	if wantStatus != 200 && bytes.Contains(body, []byte("munge")) {
		t.Fatalf("a refusal carried overlay content: %q", body)
	}
	return body
}

func tarList(t *testing.T, tarball []byte) string {
	cmd := exec.Command("tar", "-tvzf", "-")
	cmd.Stdin = bytes.NewReader(tarball)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the overlay is not a gzip tar: %v", err)
	}
	return string(out)
}

// noSecretsLogged checks bootd's log for key material and for any 16-byte run of the munge key.
func noSecretsLogged(t *testing.T, logPath string, tarball []byte) {
	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(log, []byte("PRIVATE KEY")) {
		t.Fatal("bootd logged a private key")
	}
	dir := t.TempDir()
	cmd := exec.Command("tar", "-xzf", "-", "-C", dir, "./etc/munge/munge.key")
	cmd.Stdin = bytes.NewReader(tarball)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("extract munge key: %v %s", err, out)
	}
	key, err := os.ReadFile(filepath.Join(dir, "etc/munge/munge.key"))
	if err != nil || len(key) != 1024 {
		t.Fatalf("munge key: %d bytes, %v", len(key), err)
	}
	for i := 0; i+16 <= len(key); i += 16 {
		if bytes.Contains(log, key[i:i+16]) {
			t.Fatalf("bootd's log contains bytes %d..%d of the munge key", i, i+16)
		}
	}
}
