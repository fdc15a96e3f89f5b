package bootd

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/artifact"
	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/nodetpm"
	"github.com/labcluster/gpucluster/internal/testkit/artifacttest"
	"github.com/labcluster/gpucluster/internal/testkit/swtpm"
	"github.com/sirupsen/logrus/hooks/test"
)

// pc is a machine with a TPM (swtpm), using it as bootd-node does (tpm2-tools).
type pc struct {
	tpm *swtpm.TPM
	dir string
	ek  []byte // TPM2B_PUBLIC
	ak  []byte
}

func newPC(t *testing.T, ctx context.Context) *pc {
	t.Helper()
	for _, p := range []string{"swtpm", "tpm2_createek"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s not found (scripts/setup-debian.sh installs it): %v", p, err)
		}
	}
	dir := t.TempDir()
	tpm, err := swtpm.StartTCP(ctx, filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tpm.Close)
	ek, ak, err := tpm.Keys(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	return &pc{tpm: tpm, dir: dir, ek: ek, ak: ak}
}

func (p *pc) keys() *httpd.TPMKeys { return &httpd.TPMKeys{EK: p.ek, AK: p.ak} }

// open opens a sealed overlay as bootd-node does: the TPM recovers the secret, which decrypts
// the tar.gz. It returns the overlay's files by path.
func (p *pc) open(ctx context.Context, s *httpd.Sealed) (map[string]string, error) {
	secret, err := p.tpm.Activate(ctx, p.dir, s.Credential)
	if err != nil {
		return nil, err
	}
	tgz, err := nodetpm.Decrypt(secret, s.Payload)
	if err != nil {
		return nil, err
	}
	gz, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		b, _ := io.ReadAll(tr)
		files[strings.TrimPrefix(h.Name, ".")] = string(b)
	}
}

// tpmDaemon is a daemon with c1 assigned to machineA (an image to boot, so hello answers).
func tpmDaemon(t *testing.T, ek []byte) *daemon {
	t.Helper()
	d := testDaemon(t)
	d.cfg.ImagesDir = t.TempDir()
	d.images = artifact.NewCatalog(d.cfg.ImagesDir, d.log)
	artifacttest.Publish(t, d.cfg.ImagesDir, "compute", "2026.11.21-1")
	if _, _, err := d.inv.See(machineA, inventory.Facts{}); err != nil {
		t.Fatal(err)
	}
	if _, err := (controller{d}).Assign(ctl.AssignRequest{Name: "c1", MAC: machineA, EK: ek}); err != nil {
		t.Fatal(err)
	}
	d.neighbourMAC = func(netip.Addr) (string, error) { return machineA, nil }
	return d
}

func c1Record(t *testing.T, d *daemon) inventory.Node {
	t.Helper()
	n, err := d.inv.NodeByMAC(machineA)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The node's first TPM after its assign is recorded, and its overlay sealed to it: only that TPM
// opens it. From then on a request without the TPM, or with another machine's, gets nothing it
// can open, even one that replays the node's EK; hello and the hardware report need the token
// the sealed overlay carried.
func TestTPMFirstBoot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, impostor := newPC(t, ctx), newPC(t, ctx)
	d := tpmDaemon(t, nil)
	from := netip.MustParseAddrPort(c1From)

	if _, err := (nodes{d}).Hello(from, ""); err != nil {
		t.Fatalf("before any TPM is on record, hello goes as before: %v", err)
	}
	o, err := (nodes{d}).Overlay(from, node.keys())
	if err != nil {
		t.Fatal(err)
	}
	rec := c1Record(t, d)
	if rec.TPM == nil || rec.TPM.Pinned {
		t.Fatalf("c1's TPM after its first sealed overlay: %+v, want one recorded at first use", rec.TPM)
	}
	if o.Sealed == nil || o.Sealed.EK != rec.TPM.EKSHA256 {
		t.Fatalf("c1's overlay is not sealed to its EK: %+v", o.Sealed)
	}
	files, err := node.open(ctx, o.Sealed)
	if err != nil {
		t.Fatalf("c1's own TPM cannot open its overlay: %v", err)
	}
	token := strings.TrimSpace(files[NodeTokenPath])
	if len(files["/etc/munge/munge.key"]) != 1024 || files["/etc/hostname"] != "c1\n" || len(token) != 64 {
		t.Fatalf("c1's sealed overlay lacks its munge key, hostname or token: %d files", len(files))
	}

	t.Run("a request without the TPM is refused", func(t *testing.T) {
		if _, err := (nodes{d}).Overlay(from, nil); !errors.Is(err, httpd.ErrForbidden) {
			t.Fatalf("err %v, want forbidden", err)
		}
	})
	t.Run("another machine's TPM is refused", func(t *testing.T) {
		_, err := (nodes{d}).Overlay(from, impostor.keys())
		if !errors.Is(err, httpd.ErrForbidden) || !strings.Contains(err.Error(), rec.TPM.EKSHA256) {
			t.Fatalf("err %v, want forbidden naming the recorded key", err)
		}
		if got := c1Record(t, d); !rec.TPM.SameKey(got.TPM) {
			t.Fatal("the refused key replaced the recorded one")
		}
	})
	t.Run("another machine replaying c1's EK gets nothing it can open", func(t *testing.T) {
		o, err := (nodes{d}).Overlay(from, &httpd.TPMKeys{EK: node.ek, AK: impostor.ak})
		if err != nil {
			t.Fatal(err) // bootd cannot tell: what it sends is sealed to c1's TPM
		}
		if _, err := impostor.open(ctx, o.Sealed); !errors.Is(err, swtpm.ErrRefused) {
			t.Fatalf("the impostor's TPM: %v, want a refusal", err)
		}
	})
	t.Run("the node opens its overlay again", func(t *testing.T) {
		o, err := (nodes{d}).Overlay(from, node.keys())
		if err != nil {
			t.Fatal(err)
		}
		files, err := node.open(ctx, o.Sealed)
		if err != nil || strings.TrimSpace(files[NodeTokenPath]) != token {
			t.Fatalf("second boot: %v, token %q, want the same token %q", err, files[NodeTokenPath], token)
		}
	})
	report := []byte(`{"slurmd_c":"NodeName=c1 CPUs=8 RealMemory=15866","gpus":[]}`)
	for _, tc := range []struct {
		name, token string
		ok          bool
	}{
		{"no token", "", false},
		{"another token", strings.Repeat("0", 64), false},
		{"the overlay's token", token, true},
	} {
		t.Run("hello and report with "+tc.name, func(t *testing.T) {
			_, helloErr := (nodes{d}).Hello(from, tc.token)
			_, _, reportErr := (nodes{d}).ReportHardware(from, tc.token, report)
			for what, err := range map[string]error{"hello": helloErr, "report": reportErr} {
				if tc.ok && err != nil {
					t.Errorf("%s: %v", what, err)
				}
				if !tc.ok && !errors.Is(err, httpd.ErrForbidden) {
					t.Errorf("%s: %v, want forbidden", what, err)
				}
			}
		})
	}
	if got := c1Record(t, d); got.State != inventory.StateReady {
		t.Errorf("c1 is %s after its hello and report, want ready", got.State)
	}
}

// A key pinned at assign is the only one accepted, from the first boot on; a node without a TPM
// keeps the old checks.
func TestTPMPinned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node, impostor := newPC(t, ctx), newPC(t, ctx)
	pem, err := node.tpm.EKPEM(ctx)
	if err != nil {
		t.Fatal(err)
	}
	from := netip.MustParseAddrPort(c1From)

	t.Run("the impostor's first boot is refused", func(t *testing.T) {
		d := tpmDaemon(t, pem)
		if _, err := (nodes{d}).Overlay(from, impostor.keys()); !errors.Is(err, httpd.ErrForbidden) {
			t.Fatalf("err %v, want forbidden", err)
		}
		if _, err := (nodes{d}).Overlay(from, nil); !errors.Is(err, httpd.ErrForbidden) {
			t.Fatalf("without a TPM: err %v, want forbidden", err)
		}
		o, err := (nodes{d}).Overlay(from, node.keys())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := node.open(ctx, o.Sealed); err != nil {
			t.Fatalf("the pinned TPM cannot open its overlay: %v", err)
		}
		if rec := c1Record(t, d); rec.TPM == nil || !rec.TPM.Pinned {
			t.Fatalf("c1's TPM %+v, want the pinned one", rec.TPM)
		}
	})
	t.Run("no TPM: plain overlay, hello without a token", func(t *testing.T) {
		d := tpmDaemon(t, nil)
		o, err := (nodes{d}).Overlay(from, nil)
		if err != nil || o.Sealed != nil || len(o.Files) == 0 {
			t.Fatalf("overlay of a node without a TPM: %v, sealed %v", err, o.Sealed != nil)
		}
		for _, f := range o.Files {
			if f.Path == NodeTokenPath {
				t.Fatal("a node without a TPM got a node token")
			}
		}
		if _, err := (nodes{d}).Hello(from, ""); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a bad --ek is refused at assign", func(t *testing.T) {
		d := testDaemon(t)
		if _, _, err := d.inv.See(machineA, inventory.Facts{}); err != nil {
			t.Fatal(err)
		}
		_, err := (controller{d}).Assign(ctl.AssignRequest{Name: "c1", MAC: machineA, EK: []byte("not a key")})
		if !errors.Is(err, ctl.ErrInvalid) || !strings.Contains(err.Error(), "TPM endorsement key") {
			t.Fatalf("err %v, want an invalid request naming the endorsement key", err)
		}
	})
}

// TestLostTokenKeyIsLogged: with a TPM node on record, a node-token key deleted from the secrets
// is said at start (with the nodes it strands), and not said while it is there.
func TestLostTokenKeyIsLogged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pem, err := newPC(t, ctx).tpm.EKPEM(ctx)
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	d := daemonOn(t, state)
	if _, _, err := d.inv.See(machineA, inventory.Facts{}); err != nil {
		t.Fatal(err)
	}
	if _, err := (controller{d}).Assign(ctl.AssignRequest{Name: "c1", MAC: machineA, EK: pem}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.secrets.NodeTokenKey(); err != nil {
		t.Fatal(err)
	}
	if err := d.inv.Compact(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		remove bool
		want   bool
	}{{"key kept", false, false}, {"key deleted", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.remove {
				if err := os.Remove(filepath.Join(state, "secrets", "node-token.key")); err != nil {
					t.Fatal(err)
				}
			}
			log, hook := test.NewNullLogger()
			if _, _, err := openState(state, StartOptions{}, log); err != nil {
				t.Fatal(err)
			}
			said := false
			for _, e := range hook.AllEntries() {
				if strings.Contains(e.Message, "node-token key is missing") && e.Data["nodes"] == "c1" {
					said = true
				}
			}
			if said != tc.want {
				t.Errorf("warned %v, want %v; log: %v", said, tc.want, hook.AllEntries())
			}
		})
	}
}
