package secrets

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// BMCPassword is a BMC's password. It prints redacted, so a stray log line leaks nothing.
type BMCPassword string

// String redacts the password.
func (BMCPassword) String() string { return "(redacted)" }

// GoString is String, for %#v.
func (p BMCPassword) GoString() string { return p.String() }

// ErrNoBMCPassword is returned for a node that has no password of its own and when no default
// was given either.
var ErrNoBMCPassword = errors.New("no BMC password")

// bmcDir holds the BMC passwords, one file per node and defaultBMC for the others.
const (
	bmcDir     = "bmc"
	defaultBMC = "_default" // not a node name: those start with a letter or digit
)

// MaxBMCPassword bounds a password: IPMI 2.0 takes 20 bytes, Redfish services rarely more
// than 64; a longer one is a paste gone wrong.
const MaxBMCPassword = 128

// BMCPassword returns the password of node's BMC: its own, or the default one.
func (s *Store) BMCPassword(node string) (BMCPassword, error) {
	if !nodeName.MatchString(node) {
		return "", fmt.Errorf("secrets: %q is not a node name", node)
	}
	for _, name := range []string{node, defaultBMC} {
		pw, err := s.bmcPassword(name)
		if err == nil {
			return pw, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("%w for %s: give it with `bootd power password %s` (or --default for every BMC)", ErrNoBMCPassword, node, node)
}

// bmcPassword reads one password file, or answers from memory once it has.
func (s *Store) bmcPassword(name string) (BMCPassword, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pw, ok := s.bmc[name]; ok {
		if pw == "" {
			return "", fs.ErrNotExist
		}
		return pw, nil
	}
	b, err := readSecret(filepath.Join(s.dir, bmcDir, name))
	if errors.Is(err, fs.ErrNotExist) {
		s.remember(name, "")
		return "", err
	}
	if err != nil {
		return "", err
	}
	pw := BMCPassword(strings.TrimSuffix(string(b), "\n"))
	s.remember(name, pw)
	return pw, nil
}

// remember keeps what a password file holds ("": none). Callers hold s.mu.
func (s *Store) remember(name string, pw BMCPassword) {
	if s.bmc == nil {
		s.bmc = map[string]BMCPassword{}
	}
	s.bmc[name] = pw
}

// SetBMCPassword keeps pw as node's BMC password, or as the default for every BMC without
// its own when node is "". The file is written atomically, 0600, in a 0700 directory.
func (s *Store) SetBMCPassword(node string, pw BMCPassword) error {
	name := defaultBMC
	if node != "" {
		if !nodeName.MatchString(node) {
			return fmt.Errorf("secrets: %q is not a node name", node)
		}
		name = node
	}
	if err := CheckBMCPassword(pw); err != nil {
		return err
	}
	dir := filepath.Join(s.dir, bmcDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	if err := checkPrivate(dir, true); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := writeAtomic(filepath.Join(dir, name), []byte(string(pw)+"\n")); err != nil {
		return err
	}
	s.remember(name, pw)
	return nil
}

// CheckBMCPassword wants one line of at most MaxBMCPassword bytes.
func CheckBMCPassword(pw BMCPassword) error {
	switch {
	case pw == "":
		return errors.New("an empty BMC password")
	case len(pw) > MaxBMCPassword:
		return fmt.Errorf("a BMC password of %d bytes (at most %d)", len(pw), MaxBMCPassword)
	case strings.ContainsAny(string(pw), "\n\r\x00"):
		return errors.New("a BMC password holds a line break or NUL")
	}
	return nil
}
