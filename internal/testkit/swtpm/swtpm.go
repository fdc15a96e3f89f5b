// Package swtpm runs software TPM 2.0s (swtpm, Debian's swtpm package) for tests: one serving
// tpm2-tools on the host over loopback TCP, or one behind a QEMU PC's TPM (a unix socket).
package swtpm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// TPM is a running swtpm. Its state (and so its endorsement key) lives in StateDir: a TPM
// started again on the same directory is the same TPM.
type TPM struct {
	StateDir string
	// Socket is the unix socket QEMU's emulator backend connects to (StartForQEMU), else "".
	Socket string
	port   int // TCP command port (StartTCP); the control port is port+1, as the swtpm TCTI expects
	cmd    *exec.Cmd
	done   chan struct{}
}

// startTries bounds the attempts at finding two free consecutive loopback ports.
const startTries = 10

// StartTCP starts a TPM on stateDir (made if missing) for tpm2-tools on this host: TCTI says how
// to reach it. It is powered on and started up (startup-clear), as firmware leaves a TPM.
func StartTCP(ctx context.Context, stateDir string) (*TPM, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	var last error
	for range startTries {
		port, err := freePortPair()
		if err != nil {
			return nil, err
		}
		t := &TPM{StateDir: stateDir, port: port}
		args := []string{"socket", "--tpm2", "--tpmstate", "dir=" + stateDir,
			"--server", fmt.Sprintf("type=tcp,port=%d,bindaddr=127.0.0.1", port),
			"--ctrl", fmt.Sprintf("type=tcp,port=%d,bindaddr=127.0.0.1", port+1),
			"--flags", "not-need-init,startup-clear"}
		if err := t.start(ctx, args); err != nil {
			return nil, err
		}
		if last = t.waitTCP(ctx); last == nil {
			return t, nil
		}
		t.Close()
	}
	return nil, fmt.Errorf("swtpm: no TPM on loopback after %d tries: %w", startTries, last)
}

// StartForQEMU starts a TPM on stateDir for a QEMU PC, on the unix socket sock: QEMUArgs is what
// the PC's command line needs. QEMU powers the TPM on and the PC's firmware starts it up.
func StartForQEMU(ctx context.Context, stateDir, sock string) (*TPM, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	_ = os.Remove(sock)
	t := &TPM{StateDir: stateDir, Socket: sock}
	if err := t.start(ctx, []string{"socket", "--tpm2", "--tpmstate", "dir=" + stateDir, "--ctrl", "type=unixio,path=" + sock}); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			return t, nil
		}
		if t.exited() || time.Now().After(deadline) {
			t.Close()
			return nil, fmt.Errorf("swtpm: no socket %s (log: %s)", sock, t.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// QEMUArgs attaches the TPM to a QEMU PC as a TIS device, as most PCs' TPMs appear.
func (t *TPM) QEMUArgs() []string {
	return []string{
		"-chardev", "socket,id=chrtpm,path=" + t.Socket,
		"-tpmdev", "emulator,id=tpm0,chardev=chrtpm",
		"-device", "tpm-tis,tpmdev=tpm0",
	}
}

// TCTI is tpm2-tools' address of a TPM started with StartTCP (TPM2TOOLS_TCTI).
func (t *TPM) TCTI() string { return fmt.Sprintf("swtpm:host=127.0.0.1,port=%d", t.port) }

func (t *TPM) start(ctx context.Context, args []string) error {
	if strings.Contains(t.StateDir, ",") {
		// swtpm splits its options at commas, with no way to quote one.
		return fmt.Errorf("swtpm: state directory %q has a comma, which swtpm's options cannot hold", t.StateDir)
	}
	args = append(args, "--log", "file="+t.logPath()+",level=2")
	t.cmd = exec.CommandContext(ctx, "swtpm", args...)
	t.done = make(chan struct{})
	if err := t.cmd.Start(); err != nil {
		return fmt.Errorf("swtpm: %w (install Debian's swtpm)", err)
	}
	go func() { _ = t.cmd.Wait(); close(t.done) }()
	return nil
}

func (t *TPM) logPath() string { return t.StateDir + ".log" }

func (t *TPM) logTail() string {
	b, _ := os.ReadFile(t.logPath())
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

func (t *TPM) exited() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// waitTCP waits until the command port accepts connections (or swtpm exits: its port was taken).
func (t *TPM) waitTCP(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(t.port+1), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if t.exited() {
			return fmt.Errorf("swtpm exited: %s", t.logTail())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("swtpm not listening on port %d: %w", t.port+1, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close stops the TPM; its state stays in StateDir.
func (t *TPM) Close() {
	if t.cmd == nil || t.cmd.Process == nil {
		return
	}
	_ = t.cmd.Process.Kill()
	<-t.done
}

// freePortPair returns a port p such that p and p+1 were free on loopback a moment ago.
func freePortPair() (int, error) {
	for range 50 {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := a.Addr().(*net.TCPAddr).Port
		b, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		a.Close()
		if err == nil {
			b.Close()
			return p, nil
		}
	}
	return 0, errors.New("swtpm: no two free consecutive loopback ports")
}

// Tool runs a tpm2-tools command (tpm2_createek, ...) against t, in dir.
func (t *TPM) Tool(ctx context.Context, dir string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TPM2TOOLS_TCTI="+t.TCTI())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// EKPEM is the TPM's RSA endorsement key as a PEM public key, read with tpm2-tools the way an
// admin would (tpm2_createek -G rsa -f pem), for a TPM started with StartTCP.
func (t *TPM) EKPEM(ctx context.Context) ([]byte, error) {
	dir, err := os.MkdirTemp("", "swtpm-ek-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if _, err := t.Tool(ctx, dir, "tpm2_createek", "-G", "rsa", "-c", "ek.ctx", "-u", "ek.pem", "-f", "pem"); err != nil {
		return nil, err
	}
	if _, err := t.Tool(ctx, dir, "tpm2_flushcontext", "-t"); err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(dir, "ek.pem"))
}

// Keys makes, in dir, what a node presents to bootd, as bootd-node does with tpm2-tools: the
// endorsement key (TCG template, RSA 2048) and an attestation key under it. It returns their
// TPM2B_PUBLICs; dir keeps the contexts Activate needs.
func (t *TPM) Keys(ctx context.Context, dir string) (ek, ak []byte, err error) {
	steps := [][]string{
		{"tpm2_createek", "-G", "rsa", "-c", "ek.ctx", "-u", "ek.pub"},
		// Without a resource manager (swtpm on TCP), objects stay loaded after each tool.
		{"tpm2_flushcontext", "-t"},
		{"tpm2_createak", "-C", "ek.ctx", "-c", "ak.ctx", "-G", "ecc", "-g", "sha256", "-s", "ecdsa", "-u", "ak.pub", "-n", "ak.name"},
		{"tpm2_flushcontext", "-t"},
	}
	for _, s := range steps {
		if _, err := t.Tool(ctx, dir, s[0], s[1:]...); err != nil {
			return nil, nil, err
		}
	}
	if ek, err = os.ReadFile(filepath.Join(dir, "ek.pub")); err != nil {
		return nil, nil, err
	}
	ak, err = os.ReadFile(filepath.Join(dir, "ak.pub"))
	return ek, ak, err
}

// ErrRefused is Activate's error when the TPM itself refuses the credential (it was not made for
// this TPM's EK and an AK loaded in it), as opposed to a failure before the TPM was asked.
var ErrRefused = errors.New("the TPM refused to activate the credential")

// Activate opens credential (tpm2_makecredential's file) with the keys Keys made in dir, as
// bootd-node does, and returns the secret.
func (t *TPM) Activate(ctx context.Context, dir string, credential []byte) ([]byte, error) {
	if err := os.WriteFile(filepath.Join(dir, "cred"), credential, 0o600); err != nil {
		return nil, err
	}
	_ = os.Remove(filepath.Join(dir, "secret"))
	for _, s := range [][]string{{"tpm2_flushcontext", "-t"}, {"tpm2_startauthsession", "--policy-session", "-S", "session.ctx"}, {"tpm2_policysecret", "-S", "session.ctx", "-c", "e"}} {
		if _, err := t.Tool(ctx, dir, s[0], s[1:]...); err != nil {
			return nil, err
		}
	}
	defer t.Tool(ctx, dir, "tpm2_flushcontext", "session.ctx")
	out, err := t.Tool(ctx, dir, "tpm2_activatecredential", "-c", "ak.ctx", "-C", "ek.ctx", "-i", "cred", "-o", "secret", "-P", "session:session.ctx")
	if err != nil {
		// tpm2-tools names the TPM's own answer on a line of its own.
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "ERROR: Esys_ActivateCredential") {
				return nil, fmt.Errorf("%w: %s", ErrRefused, l)
			}
		}
		return nil, err
	}
	return os.ReadFile(filepath.Join(dir, "secret"))
}
