package layers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/httpd"
	"github.com/labcluster/gpucluster/internal/nodetpm"
	"github.com/labcluster/gpucluster/internal/testkit/swtpm"
)

// sealingNodes is bootd's node side for bootd-node's TPM path: the real HTTP handler (httpd),
// sealing with nodetpm as bootd does, to the EK the node presents or to sealTo.
type sealingNodes struct {
	sealTo *nodetpm.EK // nil: the EK the request presents
	token  string      // the node token the sealed overlay carries

	mu     sync.Mutex
	sealed bool   // the last overlay went sealed
	secret string // the last sealed overlay's secret, hex
	shown  string // the token the last hello showed, "-" for no hello
}

// tpmOverlay is what sealingNodes serves: a hostname and a munge key.
var tpmOverlay = []httpd.OverlayFile{
	{Path: "/etc/hostname", Mode: 0o644, Data: []byte("c1\n")},
	{Path: "/etc/munge/munge.key", Mode: 0o400, Data: []byte("the munge key")},
}

func (n *sealingNodes) Overlay(from netip.AddrPort, keys *httpd.TPMKeys) (httpd.Overlay, error) {
	if from.Port() >= 1024 {
		return httpd.Overlay{}, fmt.Errorf("unprivileged port: %w", httpd.ErrForbidden)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sealed = keys != nil
	if keys == nil {
		return httpd.Overlay{Node: "c1", Files: tpmOverlay}, nil
	}
	p, err := nodetpm.Evidence{EK: keys.EK, AK: keys.AK}.Check()
	if err != nil {
		return httpd.Overlay{}, fmt.Errorf("%w: %w", err, httpd.ErrInvalid)
	}
	ek := p.EK
	if n.sealTo != nil {
		ek = *n.sealTo
	}
	files := append(append([]httpd.OverlayFile(nil), tpmOverlay...), httpd.OverlayFile{Path: "/etc/bootd/node.token", Mode: 0o600, Data: []byte(n.token + "\n")})
	var tgz bytes.Buffer
	if err := httpd.WriteTarGz(&tgz, files); err != nil {
		return httpd.Overlay{}, err
	}
	cred, secret, err := nodetpm.Seal(rand.Reader, ek, p)
	if err != nil {
		return httpd.Overlay{}, err
	}
	n.secret = hex.EncodeToString(secret)
	payload, err := nodetpm.Encrypt(rand.Reader, secret, tgz.Bytes())
	if err != nil {
		return httpd.Overlay{}, err
	}
	return httpd.Overlay{Node: "c1", Files: files, Sealed: &httpd.Sealed{Credential: cred, Payload: payload, EK: ek.Fingerprint()}}, nil
}

func (n *sealingNodes) Hello(from netip.AddrPort, token string) (httpd.Target, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.shown = token
	return httpd.Target{Name: "c1", Role: "compute", Address: from.Addr()}, nil
}

func (n *sealingNodes) ReportHardware(netip.AddrPort, string, []byte) (string, bool, error) {
	return "c1", false, nil
}

func (n *sealingNodes) Kickstart(netip.Addr) (string, io.ReadCloser, error) {
	return "", nil, httpd.ErrNotFound
}

func (n *sealingNodes) Power(context.Context, netip.AddrPort, string, []byte) (string, []byte, error) {
	return "", nil, httpd.ErrForbidden
}

// tpmRoot is a node's root for bootd-node with the host's bash, curl (behind a wrapper that logs
// its arguments to /tmp/curl.args), tpm2-tools (with the swtpm TCTI, where bootd-node's
// TPM2TOOLS_TCTI points) and openssl, and bootd= pointing at url.
func tpmRoot(t *testing.T, url string) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/curl", "/usr/bin/tpm2", "/usr/bin/openssl", "/usr/lib/x86_64-linux-gnu/libtss2-tcti-swtpm.so.0"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v (scripts/setup-debian.sh installs curl, tpm2-tools, openssl)", err)
		}
	}
	root := nodeRoot(t, map[string]string{
		"proc/cmdline":             "BOOT_IMAGE=vmlinuz bootd=" + url + " quiet\n",
		"proc/sys/kernel/hostname": "localhost\n",
		"usr/bin/curl":             "#!/bin/bash\nprintf '%s\\n' \"$*\" >> /tmp/curl.args\nexec /usr/bin/curl.real \"$@\"\n",
	})
	withBash(t, root)
	withHost(t, root, map[string]string{
		"/usr/bin/curl.real": "/usr/bin/curl", "/usr/bin/tpm2": "/usr/bin/tpm2", "/usr/bin/openssl": "/usr/bin/openssl",
		"/usr/lib/x86_64-linux-gnu/libtss2-tcti-swtpm.so.0": "/usr/lib/x86_64-linux-gnu/libtss2-tcti-swtpm.so.0",
	})
	for _, tool := range []string{"tpm2_createek", "tpm2_createak", "tpm2_flushcontext", "tpm2_startauthsession", "tpm2_policysecret", "tpm2_activatecredential"} {
		if err := os.Symlink("tpm2", filepath.Join(root, "usr/bin", tool)); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []string{"od", "ls"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// bootd-node overlay on a node with a TPM: it shows bootd its EK and an AK, gets its files sealed
// to that TPM, opens them (tpm2_activatecredential, openssl) and unpacks them; files sealed to
// another TPM it cannot open, and it unpacks nothing. Its hello shows the node token the sealed
// overlay carried. Neither the token nor the secret ever is an argument of curl.
func TestBootdNodeTPM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := exec.LookPath("swtpm"); err != nil {
		t.Fatalf("swtpm (scripts/setup-debian.sh installs it): %v", err)
	}
	other, err := swtpm.StartTCP(ctx, filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	otherPEM, err := other.EKPEM(ctx)
	other.Close()
	if err != nil {
		t.Fatal(err)
	}
	otherEK, err := nodetpm.ParseEKFile(otherPEM)
	if err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name       string
		tpm        bool
		sealTo     *nodetpm.EK
		wantSealed bool
		wantFail   string // "" for success: a line bootd-node prints
	}{
		{"the node's TPM", true, nil, true, ""},
		{"sealed to another TPM", true, &otherEK, true, "this TPM cannot open the files bootd sealed"},
		{"no TPM", false, nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &sealingNodes{sealTo: tc.sealTo, token: token, shown: "-"}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			log := logrus.New()
			log.SetOutput(io.Discard)
			srv := httptest.NewUnstartedServer(httpd.New(httpd.Options{BaseURL: "http://x"}, nil, nil, n, log).Handler())
			srv.Listener = ln
			srv.Start()
			defer srv.Close()
			root := tpmRoot(t, srv.URL)
			var env []string
			if tc.tpm {
				tpm, err := swtpm.StartTCP(ctx, filepath.Join(t.TempDir(), "tpm"))
				if err != nil {
					t.Fatal(err)
				}
				defer tpm.Close()
				env = append(env, "TPM2TOOLS_TCTI="+tpm.TCTI())
			}
			out, err := run(t, root, env, "/bin/bash", "/usr/libexec/bootd-node", "overlay")
			t.Logf("bootd-node overlay:\n%s", out)
			if n.sealed != tc.wantSealed {
				t.Errorf("bootd sent the overlay sealed %v, want %v", n.sealed, tc.wantSealed)
			}
			if tc.wantFail != "" {
				if err == nil || !strings.Contains(out, tc.wantFail) {
					t.Fatalf("bootd-node overlay: %v, want a failure saying %q", err, tc.wantFail)
				}
				if got := readChroot(t, root, "etc/hostname"); got != "" {
					t.Fatalf("files sealed to another TPM were unpacked: /etc/hostname %q", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("bootd-node overlay: %v", err)
			}
			if got := readChroot(t, root, "etc/munge/munge.key"); got != "the munge key" {
				t.Fatalf("munge key %q after the overlay", got)
			}
			checkMode(t, root, "etc/munge/munge.key", 0o400)
			if tc.wantSealed {
				checkMode(t, root, "etc/bootd/node.token", 0o600)
			}
			if out, err := run(t, root, env, "/bin/bash", "/usr/libexec/bootd-node", "hello"); err != nil {
				t.Fatalf("bootd-node hello: %v\n%s", err, out)
			}
			want := ""
			if tc.wantSealed {
				want = token
			}
			if n.shown != want {
				t.Errorf("hello showed token %q, want %q", n.shown, want)
			}
			args := readChroot(t, root, "tmp/curl.args")
			if strings.Contains(args, token) || n.secret != "" && strings.Contains(args, n.secret) {
				t.Errorf("a secret on curl's command line:\n%s", args)
			}
			if tmp, _ := filepath.Glob(filepath.Join(root, "tmp", "tmp.*")); len(tmp) > 0 {
				t.Errorf("bootd-node left %v behind", tmp)
			}
		})
	}
}
