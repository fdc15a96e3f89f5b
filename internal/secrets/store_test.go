package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func open(t *testing.T, state string) *Store {
	t.Helper()
	s, err := Open(state)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func needKeygen(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Fatal("ssh-keygen not installed (Debian: openssh-client; scripts/setup-debian.sh installs it)")
	}
}

func TestCluster(t *testing.T) {
	needKeygen(t)
	state := t.TempDir()
	first, err := open(t, state).Cluster()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("munge key", func(t *testing.T) {
		if len(first.MungeKey) != mungeKeyLen {
			t.Errorf("munge key is %d bytes, want %d", len(first.MungeKey), mungeKeyLen)
		}
	})
	t.Run("root key", func(t *testing.T) {
		if first.Root.Type != KeyEd25519 || !strings.HasPrefix(first.Root.Public, "ssh-ed25519 ") {
			t.Errorf("root key: %v", first.Root)
		}
		checkParses(t, first.Root)
	})
	t.Run("reused after reopen", func(t *testing.T) {
		again, err := open(t, state).Cluster()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again.MungeKey, first.MungeKey) || again.Root != first.Root {
			t.Error("second Open made new cluster secrets")
		}
	})
	t.Run("modes", func(t *testing.T) { checkModes(t, filepath.Join(state, "secrets")) })
}

func TestHostKeys(t *testing.T) {
	needKeygen(t)
	state := t.TempDir()
	s := open(t, state)
	c1, err := s.HostKeys("c1", holderA)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("one per type, parse with ssh-keygen", func(t *testing.T) {
		if len(c1) != len(HostKeyTypes) {
			t.Fatalf("%d keys, want %d", len(c1), len(HostKeyTypes))
		}
		for i, k := range c1 {
			if k.Type != HostKeyTypes[i] {
				t.Errorf("key %d is %s, want %s", i, k.Type, HostKeyTypes[i])
			}
			checkParses(t, k)
		}
	})
	t.Run("reused after reopen", func(t *testing.T) {
		again, err := open(t, state).HostKeys("c1", holderA)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(again) != fmt.Sprint(c1) || again[0].Private != c1[0].Private {
			t.Error("host keys changed across Open")
		}
	})
	t.Run("differ per node", func(t *testing.T) {
		c2, err := s.HostKeys("c2", holderB)
		if err != nil {
			t.Fatal(err)
		}
		for i := range c2 {
			if c2[i].Private == c1[i].Private {
				t.Errorf("c1 and c2 share their %s key", c2[i].Type)
			}
		}
	})
	t.Run("forget makes new ones", func(t *testing.T) {
		if err := s.Forget("c1"); err != nil {
			t.Fatal(err)
		}
		if err := s.Forget("c1"); err != nil {
			t.Errorf("second Forget: %v", err)
		}
		fresh, err := s.HostKeys("c1", holderA)
		if err != nil {
			t.Fatal(err)
		}
		if fresh[0].Private == c1[0].Private {
			t.Error("Forget kept the old key")
		}
	})
	t.Run("modes", func(t *testing.T) { checkModes(t, filepath.Join(state, "secrets")) })
}

func TestBadNodeNames(t *testing.T) {
	s := open(t, t.TempDir())
	for _, name := range []string{"", "..", "../x", "a/b", "C1", ".hidden"} {
		t.Run(name, func(t *testing.T) {
			if _, err := s.HostKeys(name, holderA); err == nil {
				t.Error("HostKeys accepted it")
			}
			if err := s.Forget(name); err == nil {
				t.Error("Forget accepted it")
			}
		})
	}
}

func TestUnsafeModes(t *testing.T) {
	needKeygen(t)
	t.Run("directory", func(t *testing.T) {
		state := t.TempDir()
		if err := os.MkdirAll(filepath.Join(state, "secrets"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(state, "secrets"), 0o755)
		if _, err := Open(state); !errors.Is(err, ErrUnsafe) {
			t.Errorf("Open: %v, want ErrUnsafe", err)
		}
	})
	t.Run("munge key", func(t *testing.T) {
		state := t.TempDir()
		if _, err := open(t, state).Cluster(); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(state, "secrets", "munge.key"), 0o644)
		if _, err := Open(state); !errors.Is(err, ErrUnsafe) {
			t.Errorf("Open: %v, want ErrUnsafe", err)
		}
	})
	t.Run("revoked list", func(t *testing.T) {
		state := t.TempDir()
		s := open(t, state)
		hostKeys(t, s, "c1", holderA)
		if err := s.Forget("c1"); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(state, "secrets", revokedFile), 0o644)
		if _, err := Open(state); !errors.Is(err, ErrUnsafe) {
			t.Errorf("Open: %v, want ErrUnsafe", err)
		}
	})
}

// TestForeignOwner: a store holding a file or directory of another user is refused at Open, mode
// 0600 or not: before, a munge key another local user planted (in a state directory that was
// world-writable before bootd's first start) was served to every node.
func TestForeignOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("chown to another user needs root, as CI has")
	}
	const nobody = 65534
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, dir string) string // returns the path it gave away
	}{
		{"a planted munge key", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "munge.key")
			if err := os.WriteFile(p, bytes.Repeat([]byte{'k'}, 1024), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"the secrets directory", func(t *testing.T, dir string) string { return dir }},
		{"a node's directory", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "hosts", "c1")
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			dir := filepath.Join(state, "secrets")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			given := tc.plant(t, dir)
			if err := os.Chown(given, nobody, nobody); err != nil {
				t.Fatal(err)
			}
			_, err := Open(state)
			if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), given+" belongs to uid 65534") {
				t.Errorf("Open: %v, want ErrUnsafe naming %s", err, given)
			}
		})
	}
}

// TestMissing: a cluster secret deleted beside others is reported, and a new host CA re-signs
// the host certificates the old one signed.
func TestMissing(t *testing.T) {
	needKeygen(t)
	state := t.TempDir()
	s := open(t, state)
	if m, err := s.Missing(); err != nil || len(m) != 0 {
		t.Fatalf("an empty store: missing %v, %v; want nothing (a first start)", m, err)
	}
	if _, err := s.Cluster(); err != nil {
		t.Fatal(err)
	}
	keys := hostKeys(t, s, "c1", holderA)
	if held, err := s.Held(); err != nil || len(held) != 1 || held[0] != "c1" {
		t.Errorf("held %v, %v; want c1", held, err)
	}
	for _, f := range []string{"munge.key", hostCAName, hostCAName + ".pub"} {
		if err := os.Remove(filepath.Join(state, "secrets", f)); err != nil {
			t.Fatal(err)
		}
	}
	s = open(t, state)
	if m, err := s.Missing(); err != nil || strings.Join(m, " ") != "munge.key "+hostCAName {
		t.Errorf("missing %v, %v; want munge.key and the host CA", m, err)
	}
	again := hostKeys(t, s, "c1", holderA)
	cs, err := s.Cluster()
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Public != keys[0].Public || again[0].Cert == keys[0].Cert {
		t.Fatal("the host key changed, or its certificate was not signed again by the new CA")
	}
	if out := sshKeygenOn(t, again[0].Cert, "-L"); !strings.Contains(out, fingerprint(t, cs.HostCA.Public)) {
		t.Errorf("certificate not signed by the new CA:\n%s", out)
	}
}

func TestConcurrent(t *testing.T) {
	needKeygen(t)
	s := open(t, t.TempDir())
	const n = 8
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := s.Cluster()
			h, herr := s.HostKeys("c1", holderA)
			if err != nil || herr != nil {
				t.Error(err, herr)
				return
			}
			got[i] = string(c.MungeKey) + c.Root.Private + h[0].Private
		})
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if got[i] != got[0] {
			t.Fatal("concurrent callers saw different secrets")
		}
	}
}

func TestRedacted(t *testing.T) {
	k := KeyPair{Type: KeyEd25519, Private: "PRIVATE", Public: "ssh-ed25519 AAAA"}
	c := ClusterSecrets{MungeKey: []byte("MUNGESECRET"), Root: k}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(format, c) + fmt.Sprintf(format, k) + fmt.Sprintf(format, HostKeys{k})
		if strings.Contains(out, "PRIVATE") || strings.Contains(out, "MUNGESECRET") {
			t.Errorf("%s prints a secret: %s", format, out)
		}
	}
}

// checkParses has the real ssh-keygen derive the public key from the private
// file, as sshd would read it.
func checkParses(t *testing.T, k KeyPair) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(f, []byte(k.Private), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ssh-keygen", "-y", "-f", f).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen -y: %v: %s", err, out)
	}
	want := strings.Join(strings.Fields(k.Public)[:2], " ")
	if got := strings.Join(strings.Fields(string(out))[:2], " "); got != want {
		t.Errorf("ssh-keygen -y gives %q, the stored public key is %q", got, want)
	}
}

// checkModes walks the store: directories 0700, files 0600, no leftovers.
func checkModes(t *testing.T, dir string) {
	t.Helper()
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", path, fi.Mode().Perm(), want)
		}
		if strings.HasPrefix(fi.Name(), ".") {
			t.Errorf("%s: temporary file left behind", path)
		}
		return nil
	})
}

func TestHostCertificates(t *testing.T) {
	state := t.TempDir()
	s := open(t, state)
	keys, err := s.HostKeys("c4", holderA, "c4", "10.80.0.104")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := s.Cluster()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		t.Run(string(k.Type), func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "cert.pub")
			if err := os.WriteFile(f, []byte(k.Cert+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("ssh-keygen", "-L", "-f", f).CombinedOutput()
			if err != nil {
				t.Fatalf("ssh-keygen -L: %v\n%s", err, out)
			}
			caFingerprint, _ := exec.Command("sh", "-c", "echo '"+cs.HostCA.Public+"' | ssh-keygen -lf - | cut -d' ' -f2").Output()
			for _, want := range []string{"host certificate", "c4", "10.80.0.104", "forever", strings.TrimSpace(string(caFingerprint))} {
				if !strings.Contains(string(out), want) {
					t.Errorf("certificate lacks %q:\n%s", want, out)
				}
			}
		})
	}
	again, err := s.HostKeys("c4", holderA, "c4", "10.80.0.104")
	if err != nil || again[0].Cert != keys[0].Cert {
		t.Fatalf("second call re-signed the certificate (%v)", err)
	}
	other, err := s.HostKeys("c4", holderA, "c4", "c4.lab", "10.80.0.104")
	if err != nil || other[0].Cert == keys[0].Cert {
		t.Fatalf("new principals kept the old certificate (%v)", err)
	}
	// A key pair made anew (a crash lost its private file) is not served with the old
	// certificate by the next bootd.
	dir, _ := s.nodeDir("c4")
	if err := os.Remove(filepath.Join(dir, "ssh_host_ed25519_key")); err != nil {
		t.Fatal(err)
	}
	remade, err := open(t, state).HostKeys("c4", holderA, "c4", "c4.lab", "10.80.0.104")
	if err != nil || remade[0].Public == other[0].Public {
		t.Fatalf("no new ed25519 key (%v)", err)
	}
	if got, want := certKey(t, remade[0].Cert), fingerprint(t, remade[0].Public); got != want {
		t.Errorf("certificate of key %s served with key %s", got, want)
	}
}

// certKey is the fingerprint of the key a certificate certifies, as ssh-keygen -L reads it.
func certKey(t *testing.T, cert string) string {
	t.Helper()
	out := sshKeygenOn(t, cert, "-L")
	for l := range strings.Lines(out) {
		if f := strings.Fields(l); len(f) >= 4 && f[0] == "Public" && f[1] == "key:" {
			return f[3]
		}
	}
	t.Fatalf("ssh-keygen -L names no public key:\n%s", out)
	return ""
}

func fingerprint(t *testing.T, pub string) string {
	t.Helper()
	return strings.Fields(sshKeygenOn(t, pub, "-l"))[1]
}

// sshKeygenOn runs ssh-keygen with args on a file holding line.
func sshKeygenOn(t *testing.T, line string, args ...string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "key.pub")
	if err := os.WriteFile(f, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ssh-keygen", append(args, "-f", f)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen %v: %v\n%s", args, err, out)
	}
	return string(out)
}
