package masterssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Config says how to reach the master.
type Config struct {
	Addr    netip.AddrPort // the master's address, port 22
	RootKey string         // root's private key, OpenSSH format
	HostCA  string         // the host CA's public key, as an authorized_keys line
	Revoked []string       // revoked host keys, "type base64" each
	// Sessions bounds the scripts running at once: each is a session on one connection, and
	// OpenSSH's sshd allows 10 (MaxSessions). Default 8.
	Sessions int
	// DialTimeout bounds the connection and the SSH handshake. Default 15 s.
	DialTimeout time.Duration
}

// Client runs scripts on the master. It connects at its first Run; a failed connection is
// tried again at the next.
type Client struct {
	cfg Config
	sem chan struct{}

	mu   sync.Mutex
	conn *ssh.Client
}

// New returns a client for the master of cfg; nothing is dialled yet.
func New(cfg Config) *Client {
	if cfg.Sessions <= 0 {
		cfg.Sessions = 8
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 15 * time.Second
	}
	return &Client{cfg: cfg, sem: make(chan struct{}, cfg.Sessions)}
}

// maxOutput bounds what one script may print: a check's output is a few kilobytes.
const maxOutput = 4 << 20

// Run runs script with /bin/sh on the master (its standard input) and returns its standard
// output. A script that exits non-zero returns its output and an error with the status and the
// end of its standard error. ctx ends the session, which makes sshd hang up on the script.
func (c *Client) Run(ctx context.Context, script string) (string, error) {
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return "", ctx.Err()
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return "", err
	}
	s, err := conn.NewSession()
	if err != nil {
		c.drop(conn)
		return "", fmt.Errorf("session on %s: %w", c.cfg.Addr, err)
	}
	defer s.Close()
	var stdout, stderr limited
	s.Stdin, s.Stdout, s.Stderr = strings.NewReader(script), &stdout, &stderr
	if err := s.Start("/bin/sh -s"); err != nil {
		return "", fmt.Errorf("start a shell on %s: %w", c.cfg.Addr, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		s.Close()
		<-done
		return stdout.String(), ctx.Err()
	}
	var exit *ssh.ExitError
	switch {
	case errors.As(err, &exit):
		return stdout.String(), fmt.Errorf("script on %s exited with status %d: %s", c.cfg.Addr, exit.ExitStatus(), strings.TrimSpace(tail(stderr.String(), 500)))
	case err != nil:
		return stdout.String(), fmt.Errorf("script on %s: %w", c.cfg.Addr, err)
	}
	return stdout.String(), nil
}

// connect returns the connection to the master, dialling it when there is none.
func (c *Client) connect(ctx context.Context) (*ssh.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		return c.conn, nil
	}
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	return conn, nil
}

// drop forgets a connection that failed, so the next Run dials again.
func (c *Client) drop(conn *ssh.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == conn {
		c.conn.Close()
		c.conn = nil
	}
}

func (c *Client) dial(ctx context.Context) (*ssh.Client, error) {
	cfg, err := c.clientConfig()
	if err != nil {
		return nil, err
	}
	addr := c.cfg.Addr.String()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	_ = nc.SetDeadline(deadline)
	sc, chans, reqs, err := ssh.NewClientConn(nc, addr, cfg)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("ssh to %s as root: %w", addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	return ssh.NewClient(sc, chans, reqs), nil
}

// clientConfig logs in as root with root's key and accepts only a host certificate from the
// host CA, for the address dialled (bootd signs every node's certificate for its address too),
// whose key is not revoked.
func (c *Client) clientConfig() (*ssh.ClientConfig, error) {
	signer, err := ssh.ParsePrivateKey([]byte(c.cfg.RootKey))
	if err != nil {
		return nil, fmt.Errorf("root's key: %w", err)
	}
	ca, _, _, _, err := ssh.ParseAuthorizedKey([]byte(c.cfg.HostCA))
	if err != nil {
		return nil, fmt.Errorf("host CA's public key: %w", err)
	}
	revoked := map[string]bool{}
	for _, line := range c.cfg.Revoked {
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("revoked host key %q: %w", line, err)
		}
		revoked[string(k.Marshal())] = true
	}
	checker := &ssh.CertChecker{
		IsHostAuthority: func(auth ssh.PublicKey, _ string) bool { return bytes.Equal(auth.Marshal(), ca.Marshal()) },
		IsRevoked:       func(cert *ssh.Certificate) bool { return revoked[string(cert.Key.Marshal())] },
		HostKeyFallback: func(string, net.Addr, ssh.PublicKey) error {
			return errors.New("the host offers a key without a certificate from the cluster's host CA (is its sshd_config.d/50-bootd-host-certificates.conf in place?)")
		},
	}
	return &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: checker.CheckHostKey,
		// Certificates first, so that sshd offers one; plain keys last, only so that a master
		// without its certificate is refused with a message that says so.
		HostKeyAlgorithms: []string{ssh.CertAlgoED25519v01, ssh.CertAlgoECDSA256v01, ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01,
			ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256},
	}, nil
}

// Close hangs up.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	return err
}

// limited keeps the first maxOutput bytes written to it.
type limited struct{ bytes.Buffer }

func (l *limited) Write(p []byte) (int, error) {
	if room := maxOutput - l.Len(); room > 0 {
		l.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
