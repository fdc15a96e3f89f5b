//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/nodetpm"
	"github.com/labcluster/gpucluster/internal/testkit/swtpm"
	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// tpmKeys is a PC's TPM as the test read it before the PC booted: its endorsement key's
// TPM2B_PUBLIC (what an eavesdropper sees the node send) and fingerprint (what bootd nodes shows).
type tpmKeys struct {
	ekPub       []byte
	fingerprint string
}

// readTPM makes the TPM whose state lives in dir and reads its endorsement key with tpm2-tools,
// as an admin would; the PC started on dir later has the same TPM.
func readTPM(ctx context.Context, t *testing.T, dir string) tpmKeys {
	t.Helper()
	tpm, err := swtpm.StartTCP(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer tpm.Close()
	work := t.TempDir()
	ekPub, _, err := tpm.Keys(ctx, work)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := tpm.EKPEM(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := nodetpm.ParseEKFile(pem)
	if err != nil {
		t.Fatal(err)
	}
	return tpmKeys{ekPub: ekPub, fingerprint: ek.Fingerprint()}
}

// keep keeps vm running until TestNodeBoot ends.
func (nb *nodeBoot) keep(vm *vlab.VM) {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	nb.vms = append(nb.vms, vm)
}

func (nb *nodeBoot) killAll() {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	for _, vm := range nb.vms {
		vm.Kill()
	}
}

func (nb *nodeBoot) tpmOf(name string) tpmKeys {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	return nb.tpms[name]
}

// impostors copy the nodes' MACs and addresses while the nodes are up (H4). Against c1, which
// has a TPM: a PC with its own TPM netboots as c1 and is refused; a host that replays c1's EK
// (public: it travels in the clear) gets c1's files sealed to c1's TPM, which its own TPM cannot
// open. Against c2, which has none: a host gets c2's secrets, the gap SECURITY.md states.
func (nb *nodeBoot) impostors(ctx context.Context, t *testing.T) {
	c1, c2 := nodeBootPCs[0], nodeBootPCs[1]
	t.Run("a host copying c2's MAC and address while c2 is up gets its secrets: no TPM, the gap SECURITY.md states", func(t *testing.T) {
		thief := nb.thief(ctx, t, "thief2", c2)
		list := tarList(t, overlayAs(ctx, t, thief, true, 200))
		if !strings.Contains(list, "./etc/munge/munge.key") {
			t.Fatalf("the copy of c2 got an overlay without the munge key:\n%s", list)
		}
	})
	t.Run("a host copying c1's MAC and address while c1 is up and replaying c1's EK gets nothing its TPM opens", func(t *testing.T) {
		thief := nb.thief(ctx, t, "thief1", c1)
		overlayAs(ctx, t, thief, true, 403) // without a TPM: nothing
		mine := t.TempDir()
		tpm, err := swtpm.StartTCP(ctx, filepath.Join(mine, "state"))
		if err != nil {
			t.Fatal(err)
		}
		defer tpm.Close()
		if _, _, err := tpm.Keys(ctx, mine); err != nil {
			t.Fatal(err)
		}
		// c1's EK, as anyone who saw c1 boot has it, and an AK of the thief's own TPM.
		if err := os.WriteFile(filepath.Join(mine, "c1-ek.pub"), nb.tpmOf(c1.name).ekPub, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := thief.Command(ctx, "curl", "-sS", "--max-time", "20", "--local-port", "600-1023", "-o", "-", "-w", "\n%{http_code}",
			"-F", "ek=@"+filepath.Join(mine, "c1-ek.pub"), "-F", "ak=@"+filepath.Join(mine, "ak.pub"), "http://10.80.0.1/api/v1/node/overlay").Output()
		if err != nil {
			t.Fatalf("curl: %v", err)
		}
		i := bytes.LastIndexByte(out, '\n')
		if status := strings.TrimSpace(string(out[i+1:])); status != "200" {
			t.Fatalf("the replayed EK: HTTP %s, want 200 (bootd cannot tell it from c1's: what it sends is sealed to c1's TPM)", status)
		}
		cred, payload := untarSealed(t, out[:i])
		if bytes.Contains(payload, []byte("munge")) || bytes.Contains(payload, []byte("PRIVATE KEY")) {
			t.Fatal("the sealed payload carries plain secrets")
		}
		_, err = tpm.Activate(ctx, mine, cred)
		if !errors.Is(err, swtpm.ErrRefused) {
			t.Fatalf("the thief's TPM on c1's credential: %v, want the TPM's refusal", err)
		}
		t.Logf("the thief's TPM: %v", err)
	})
	t.Run("a PC with c1's MAC and its own TPM, netbooted while c1 is up, gets nothing", func(t *testing.T) {
		nb.impostorPC(ctx, t, c1)
	})
}

// thief is a host with pc's MAC and address on the lab's segment, cabled while pc is up.
func (nb *nodeBoot) thief(ctx context.Context, t *testing.T, name string, pc nodePC) *vlab.Host {
	t.Helper()
	h, err := nb.lab.AddHost(ctx, name, mustMAC(pc.mac))
	if err != nil {
		t.Fatal(err)
	}
	setAddr(ctx, t, h, pc.addr+"/24")
	t.Cleanup(func() { _, _ = h.Run(context.Background(), "ip", "link", "set", "eth0", "down") })
	return h
}

// untarSealed reads a sealed overlay: the credential and the encrypted payload.
func untarSealed(t *testing.T, body []byte) (cred, payload []byte) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(body))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the answer is not a sealed overlay (tar): %v", err)
		}
		b, _ := io.ReadAll(tr)
		switch h.Name {
		case "credential":
			cred = b
		case "overlay.tar.gz.enc":
			payload = b
		default:
			t.Fatalf("a sealed overlay with %s in it", h.Name)
		}
	}
	if cred == nil || payload == nil {
		t.Fatal("a sealed overlay without its credential or payload")
	}
	return cred, payload
}

// impostorPC netboots a PC with pc's MAC and a TPM of its own while pc is up: DHCP gives it pc's
// address and iPXE pc's boot script (bootd cannot tell the two apart), the image's bootd-node
// shows its TPM, and bootd refuses it every time; it unpacks nothing. Its asset tag has it try 3
// times, not 10: each try is the same request, refused the same way.
func (nb *nodeBoot) impostorPC(ctx context.Context, t *testing.T, pc nodePC) {
	spec := vlab.VMSpec{Name: "impostor-" + pc.name, MAC: mustMAC(pc.mac), Firmware: vlab.BIOS, MemoryMiB: nodeBootMemoryMiB,
		TPMDir: filepath.Join(nb.dir, "impostor-tpm"), AssetTag: testrepo.ImpatientAssetTag}
	started := time.Now()
	vm, err := nb.lab.StartVM(ctx, spec, nb.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Kill()
	bootCtx, cancel := context.WithTimeout(ctx, 2*bootLimit)
	defer cancel()
	m, err := vm.WaitConsole(bootCtx, regexp.MustCompile(`bootd-node overlay: error: (.*)|bootd-node overlay: files sealed to this node's TPM, opened`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m[0], "error: bootd sent no files for this TPM") {
		t.Fatalf("the impostor PC's bootd-node overlay: %q, want bootd's refusal", m[0])
	}
	refused := time.Since(started)
	if _, err := vm.WaitConsole(bootCtx, regexp.MustCompile(`NODEBOOT-DONE`)); err != nil {
		t.Fatal(err)
	}
	console := vm.Console()
	t.Logf("impostor PC: power on to its overlay refused %s; console markers:\n%s", refused.Round(100*time.Millisecond), markers(console))
	// Every try of the overlay reached bootd and was refused (not a network failure).
	overlay, _, _ := strings.Cut(console, "bootd-node overlay: error:")
	if n := strings.Count(overlay, "returned error: 403"); n != 3 {
		t.Errorf("the impostor's console shows %d refusals (HTTP 403) of its overlay, want its 3 tries", n)
	}
	for _, re := range []string{`NODEBOOT-EXEC: bootd-overlay.service: /usr/libexec/bootd-node overlay: failed`,
		`NODEBOOT-MUNGE-KEY: missing`, `NODEBOOT-SSH-HOST-KEY: missing`} {
		if !regexp.MustCompile(re).MatchString(console) {
			t.Errorf("the impostor PC's console has no line %s", re)
		}
	}
	log, _ := os.ReadFile(nb.b.Proc.LogPath)
	want := fmt.Sprintf(`overlay refused.*%s's TPM endorsement key is %s \(recorded at its first boot\), not this one`, pc.name, nb.tpmOf(pc.name).fingerprint)
	if !regexp.MustCompile(want).Match(log) {
		t.Errorf("bootd's log has no line matching %s", want)
	}
	nodes, err := nb.b.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Nodes {
		if n.Name == pc.name && (n.TPM == nil || n.TPM.EKSHA256 != nb.tpmOf(pc.name).fingerprint) {
			t.Errorf("%s's TPM after the impostor: %+v", pc.name, n.TPM)
		}
	}
}
