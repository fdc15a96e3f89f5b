package testrepo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Keyring is a GnuPG home holding test signing keys (no passphrase), for rpmsign.
type Keyring struct{ Home string }

// NewKeyring makes an empty keyring in dir (created, mode 0700).
func NewKeyring(dir string) (*Keyring, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &Keyring{Home: dir}, nil
}

// AddKey generates an RSA signing key for uid ("Name <mail>") and returns its public key,
// ASCII-armoured, as a repository publishes it at its gpgkey URL.
func (k *Keyring) AddKey(ctx context.Context, uid string) ([]byte, error) {
	if _, err := k.gpg(ctx, "--batch", "--passphrase", "", "--quick-gen-key", uid, "rsa2048", "sign", "never"); err != nil {
		return nil, err
	}
	return k.gpg(ctx, "--armor", "--export", uid)
}

// Sign signs RPM files in place with the key of uid, as a distribution signs what it publishes.
func (k *Keyring) Sign(ctx context.Context, uid string, files ...string) error {
	if len(files) == 0 {
		return nil
	}
	args := []string{"--addsign", "--define", "_gpg_name " + uid, "--define", "_gpg_path " + k.Home,
		"--define", "__gpg /usr/bin/gpg"}
	cmd := exec.CommandContext(ctx, "rpmsign", append(args, files...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + k.Home, "GNUPGHOME=" + k.Home, "LANG=C", "LC_ALL=C", "TZ=UTC"}
	return runCmd(cmd)
}

func (k *Keyring) gpg(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "gpg", append([]string{"--homedir", k.Home, "--quiet"}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + k.Home, "LANG=C", "LC_ALL=C", "TZ=UTC"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("gpg %v: %w: %s", args, err, errb.String())
	}
	return out.Bytes(), nil
}

// RPMs lists the RPM files of the repository at dir (Packages/*/).
func RPMs(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, "Packages", "*", "*.rpm"))
}
