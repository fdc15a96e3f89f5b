package masterssh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// keyPair is an ed25519 key as a signer and as an authorized_keys line.
type keyPair struct {
	signer ssh.Signer
	line   string
	pem    string
}

func newKey(t *testing.T) keyPair {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{signer: s, line: string(ssh.MarshalAuthorizedKey(s.PublicKey())), pem: string(pem.EncodeToMemory(block))}
}

// hostCert signs host's key with ca for principals.
func hostCert(t *testing.T, ca, host keyPair, principals ...string) ssh.Signer {
	t.Helper()
	cert := &ssh.Certificate{Key: host.signer.PublicKey(), CertType: ssh.HostCert, KeyId: "master", ValidPrincipals: principals, ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(rand.Reader, ca.signer); err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewCertSigner(cert, host.signer)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sshd is a loopback SSH server that lets root in with one key and runs each exec request
// with sh -c, as OpenSSH's sshd does with root's shell.
func sshd(t *testing.T, hostKey ssh.Signer, root ssh.PublicKey) netip.AddrPort {
	t.Helper()
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(c ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if c.User() == "root" && string(k.Marshal()) == string(root.Marshal()) {
			return nil, nil
		}
		return nil, errors.New("key not authorized")
	}}
	cfg.AddHostKey(hostKey)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); serve(nc, cfg) }()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

func serve(nc net.Conn, cfg *ssh.ServerConfig) {
	defer nc.Close()
	_, chans, reqs, err := ssh.NewServerConn(nc, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nch := range chans {
		ch, reqs, err := nch.Accept()
		if err != nil {
			return
		}
		go func() {
			defer ch.Close()
			for req := range reqs {
				if req.Type != "exec" {
					req.Reply(false, nil)
					continue
				}
				n := binary.BigEndian.Uint32(req.Payload)
				cmd := exec.Command("sh", "-c", string(req.Payload[4:4+n]))
				cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
				req.Reply(true, nil)
				status := 0
				if err := cmd.Run(); err != nil {
					status = 1
					var ee *exec.ExitError
					if errors.As(err, &ee) {
						status = ee.ExitCode()
					}
				}
				ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, uint32(status)))
				return
			}
		}()
	}
}

func TestRun(t *testing.T) {
	ca, host, root := newKey(t), newKey(t), newKey(t)
	addr := sshd(t, hostCert(t, ca, host, "master", "127.0.0.1"), root.signer.PublicKey())
	c := New(Config{Addr: addr, RootKey: root.pem, HostCA: ca.line})
	defer c.Close()
	ctx := context.Background()
	out, err := c.Run(ctx, "echo \"hello from $(id -un 2>/dev/null || echo someone)\"\necho second line\n")
	if err != nil || !strings.HasPrefix(out, "hello from ") || !strings.HasSuffix(out, "second line\n") {
		t.Fatalf("Run = %q, %v", out, err)
	}
	out, err = c.Run(ctx, "echo partial; echo 'it broke' >&2; exit 3\n")
	if err == nil || out != "partial\n" || !strings.Contains(err.Error(), "status 3: it broke") {
		t.Fatalf("failing script: %q, %v", out, err)
	}
	// Scripts share the connection, up to Sessions at once.
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := c.Run(ctx, "echo ok\n"); err != nil || out != "ok\n" {
				errs <- errors.Join(err, errors.New(out))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// ctx ends a script that runs too long.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.Run(short, "sleep 30\n"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a script past its context: %v", err)
	}
}

// bootd refuses any master that the host CA does not vouch for, at the address it dials.
func TestRefusedMasters(t *testing.T) {
	ca, host, root := newKey(t), newKey(t), newKey(t)
	other := newKey(t)
	for _, tt := range []struct {
		name    string
		hostKey ssh.Signer
		revoked []string
		rootKey string
		want    string
	}{
		{"plain host key", host.signer, nil, root.pem, "without a certificate"},
		{"another CA", hostCert(t, other, host, "127.0.0.1"), nil, root.pem, "no authorities"},
		{"certificate for another name", hostCert(t, ca, host, "c1", "10.80.0.101"), nil, root.pem, "principal"},
		{"revoked key", hostCert(t, ca, host, "127.0.0.1"), []string{host.line}, root.pem, "revoked"},
		{"root key not authorized", hostCert(t, ca, host, "127.0.0.1"), nil, other.pem, "unable to authenticate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := sshd(t, tt.hostKey, root.signer.PublicKey())
			c := New(Config{Addr: addr, RootKey: tt.rootKey, HostCA: ca.line, Revoked: tt.revoked})
			defer c.Close()
			if out, err := c.Run(context.Background(), "echo ran\n"); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %q, %v; want an error with %q", out, err, tt.want)
			}
		})
	}
	t.Run("nothing listening", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := netip.MustParseAddrPort(ln.Addr().String())
		ln.Close()
		c := New(Config{Addr: addr, RootKey: root.pem, HostCA: ca.line})
		if _, err := c.Run(context.Background(), "true\n"); err == nil || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("Run = %v", err)
		}
	})
}
