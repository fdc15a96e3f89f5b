package nodetpm

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/swtpm"
)

// node is a TPM as a node uses it, through tpm2-tools: the commands bootd-node runs.
type node struct {
	t   *testing.T
	tpm *swtpm.TPM
	dir string
}

func newNode(t *testing.T, ctx context.Context) *node {
	t.Helper()
	for _, p := range []string{"swtpm", "tpm2_createek", "openssl"} {
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
	return &node{t: t, tpm: tpm, dir: dir}
}

func (n *node) run(ctx context.Context, name string, args ...string) (string, error) {
	return n.tpm.Tool(ctx, n.dir, name, args...)
}

func (n *node) must(ctx context.Context, name string, args ...string) {
	n.t.Helper()
	if out, err := n.run(ctx, name, args...); err != nil {
		n.t.Fatalf("%v\n%s", err, out)
	}
}

func (n *node) read(name string) []byte {
	n.t.Helper()
	b, err := os.ReadFile(filepath.Join(n.dir, name))
	if err != nil {
		n.t.Fatal(err)
	}
	return b
}

// evidence makes the EK and an AK under it, as bootd-node does, and returns their public areas.
func (n *node) evidence(ctx context.Context) Evidence {
	n.t.Helper()
	ek, ak, err := n.tpm.Keys(ctx, n.dir)
	if err != nil {
		n.t.Fatal(err)
	}
	return Evidence{EK: ek, AK: ak}
}

// activate opens a credential with the TPM, as bootd-node does.
func (n *node) activate(ctx context.Context, credential []byte) ([]byte, error) {
	return n.tpm.Activate(ctx, n.dir, credential)
}

// A credential sealed to a node's EK opens on its TPM, and only there: a second TPM that presents
// its own AK, or replays the first node's EK with its own AK, gets nothing.
func TestSealOpensOnlyOnItsTPM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	real, other := newNode(t, ctx), newNode(t, ctx)
	realEv, otherEv := real.evidence(ctx), other.evidence(ctx)
	realP, err := realEv.Check()
	if err != nil {
		t.Fatal(err)
	}
	otherP, err := otherEv.Check()
	if err != nil {
		t.Fatal(err)
	}
	if realP.EK.Equal(otherP.EK) {
		t.Fatal("two swtpms have the same EK")
	}

	t.Run("the node's TPM opens its credential", func(t *testing.T) {
		cred, secret, err := Seal(rand.Reader, realP.EK, realP)
		if err != nil {
			t.Fatal(err)
		}
		got, err := real.activate(ctx, cred)
		if err != nil {
			t.Fatalf("tpm2_activatecredential: %v", err)
		}
		if !bytes.Equal(got, secret) {
			t.Fatalf("the TPM recovered %x, bootd sealed %x", got, secret)
		}
	})
	// The impostor claims the real node's EK (it is public) with an AK of its own TPM.
	replayed := Presented{EK: realP.EK, akName: otherP.akName}
	for name, p := range map[string]Presented{"its own EK and AK": otherP, "the node's EK, its own AK": replayed} {
		t.Run("another TPM presenting "+name+" cannot open what is sealed to the node", func(t *testing.T) {
			cred, secret, err := Seal(rand.Reader, realP.EK, p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := other.activate(ctx, cred)
			if err == nil {
				t.Fatalf("another TPM opened the node's credential: got %x (sealed %x)", got, secret)
			}
			// The TPM's own refusal, not some failure before it. swtpm's libtpms answers a seed
			// its EK cannot decrypt with TPM_RC_FAILURE (0x101) and goes on working (the next
			// subtest opens a credential on this TPM).
			if !errors.Is(err, swtpm.ErrRefused) {
				t.Fatalf("activation failed before the TPM could refuse it:\n%v", err)
			}
			t.Logf("refused as it should be: %v", err)
		})
	}
	t.Run("the other TPM opens what is sealed to it", func(t *testing.T) {
		cred, secret, err := Seal(rand.Reader, otherP.EK, otherP)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := other.activate(ctx, cred); err != nil || !bytes.Equal(got, secret) {
			t.Fatalf("the other TPM did not open its own credential: %v", err)
		}
	})
	t.Run("the node's TPM refuses a credential for another AK", func(t *testing.T) {
		cred, _, err := Seal(rand.Reader, realP.EK, otherP)
		if err != nil {
			t.Fatal(err)
		}
		_, err = real.activate(ctx, cred)
		if !errors.Is(err, swtpm.ErrRefused) {
			t.Fatalf("the TPM did not refuse a credential made for an AK it does not hold: %v", err)
		}
		t.Logf("refused as it should be: %v", err)
	})
}

// What Encrypt writes, the node's openssl opens with the secret's hex as password.
func TestEncryptOpensWithOpenSSL(t *testing.T) {
	for _, size := range []int{0, 1, 15, 16, 17, 70000} {
		t.Run(fmt.Sprintf("%d bytes", size), func(t *testing.T) {
			plain := make([]byte, size)
			_, _ = rand.Read(plain)
			secret := make([]byte, SecretSize)
			_, _ = rand.Read(secret)
			enc, err := Encrypt(rand.Reader, secret, plain)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			pass := filepath.Join(dir, "secret.hex")
			if err := os.WriteFile(pass, []byte(hex.EncodeToString(secret)), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("openssl", "enc", "-d", "-aes-256-ctr", "-pbkdf2", "-iter", "1", "-md", "sha256", "-pass", "file:"+pass)
			cmd.Stdin = bytes.NewReader(enc)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			got, err := cmd.Output()
			if err != nil {
				t.Fatalf("openssl enc -d: %v\n%s", err, stderr.String())
			}
			if !bytes.Equal(got, plain) {
				t.Fatalf("openssl decrypted %d bytes that differ from the %d encrypted", len(got), len(plain))
			}
			if back, err := Decrypt(secret, enc); err != nil || !bytes.Equal(back, plain) {
				t.Fatalf("Decrypt: %v", err)
			}
			wrong := bytes.Clone(secret)
			wrong[0] ^= 1
			if back, _ := Decrypt(wrong, enc); size > 0 && bytes.Equal(back, plain) {
				t.Fatal("another secret decrypted the payload")
			}
		})
	}
}

// The EK files an admin may pin (tpm2-tools' PEM and TPM2B_PUBLIC, an EK certificate in PEM and
// DER) give the same key and the fingerprint openssl computes; other keys are refused.
func TestParseEKFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := newNode(t, ctx)
	n.must(ctx, "tpm2_createek", "-G", "rsa", "-c", "ek.ctx", "-u", "ek.pub")
	n.must(ctx, "tpm2_flushcontext", "-t")
	n.must(ctx, "tpm2_readpublic", "-c", "ek.ctx", "-f", "pem", "-o", "ek.pem")
	n.must(ctx, "tpm2_flushcontext", "-t")
	n.must(ctx, "tpm2_createak", "-C", "ek.ctx", "-c", "ak.ctx", "-u", "ak.pub")
	pemKey := n.read("ek.pem")
	certDER := ekCert(t, pemKey)

	der, err := exec.Command("openssl", "pkey", "-pubin", "-in", filepath.Join(n.dir, "ek.pem"), "-outform", "der").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := EK{DER: der}.Fingerprint()

	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKIXPublicKey(&ecKey.PublicKey)
	smallKey, _ := rsa.GenerateKey(rand.Reader, 1024)
	smallDER, _ := x509.MarshalPKIXPublicKey(&smallKey.PublicKey)
	for _, tc := range []struct {
		name    string
		data    []byte
		wantErr string
	}{
		{"PEM public key (tpm2_readpublic -f pem)", pemKey, ""},
		{"TPM2B_PUBLIC (tpm2_createek -u)", n.read("ek.pub"), ""},
		{"EK certificate, PEM", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}), ""},
		{"EK certificate, DER", certDER, ""},
		{"an AK is no EK", n.read("ak.pub"), "not those of an endorsement key"},
		{"ECDSA key", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecDER}), "RSA 2048"},
		{"RSA 1024", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: smallDER}), "1024 bits"},
		{"private key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}), `"PRIVATE KEY"`},
		{"garbage", []byte("hello\n"), "neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ek, err := ParseEKFile(tc.data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := ek.Fingerprint(); got != want {
				t.Fatalf("fingerprint %s, openssl says %s", got, want)
			}
		})
	}
}

// ekCert is a certificate for the EK in pemKey, signed by a made-up CA, as a TPM maker's is.
func ekCert(t *testing.T, pemKey []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(pemKey)
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test EK"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<31, 0), KeyUsage: x509.KeyUsageKeyEncipherment}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, ca)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// Check refuses what is not a node's EK and AK.
func TestCheckEvidence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := newNode(t, ctx)
	ev := n.evidence(ctx)
	for _, tc := range []struct {
		name    string
		ev      Evidence
		wantErr string
	}{
		{"EK and AK", ev, ""},
		{"AK as EK", Evidence{EK: ev.AK, AK: ev.AK}, "EK:"},
		{"EK as AK", Evidence{EK: ev.EK, AK: ev.EK}, "AK: not a restricted signing key"},
		{"truncated EK", Evidence{EK: ev.EK[:len(ev.EK)-1], AK: ev.AK}, "EK: not a TPM2B_PUBLIC"},
		{"trailing bytes", Evidence{EK: append(bytes.Clone(ev.EK), 0), AK: ev.AK}, "EK: not a TPM2B_PUBLIC"},
		{"empty", Evidence{}, "EK: not a TPM2B_PUBLIC"},
		{"huge", Evidence{EK: make([]byte, maxPublic+1), AK: ev.AK}, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.ev.Check()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}
