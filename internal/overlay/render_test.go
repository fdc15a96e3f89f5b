package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/golden"
	"github.com/labcluster/gpucluster/overlays"
)

// templatesDir is the repository's overlays/, read from disk so that a test
// sees the templates as edited, not as last embedded.
var templatesDir = os.DirFS("../../overlays")

var keyTypes = []string{"ed25519", "ecdsa", "rsa"}

// fakeHostKeys are recognisable stand-ins: rendering never parses keys.
func fakeHostKeys(node string) HostKeys {
	var keys HostKeys
	for _, t := range keyTypes {
		keys = append(keys, HostKey{
			Type:    t,
			Private: fmt.Sprintf("-----BEGIN OPENSSH PRIVATE KEY-----\nHOST-PRIVATE-%s-%s\n-----END OPENSSH PRIVATE KEY-----\n", node, t),
			Public:  fmt.Sprintf("ssh-%s HOST-PUBLIC-%s-%s root@%s", t, node, t, node),
			Cert:    fmt.Sprintf("ssh-%s-cert-v01@openssh.com HOST-CERT-%s-%s", t, node, t),
		})
	}
	return keys
}

// reference is the reference lab: master and c1..c3; c1 has two GPUs, c2
// reported no GPU, c3 has not reported yet.
func reference() Cluster {
	node := func(name, role string, last byte, hw *Hardware) Node {
		return Node{Name: name, Role: role, Address: netip.AddrFrom4([4]byte{10, 80, 0, last}),
			MAC: fmt.Sprintf("52:54:00:12:34:%02x", last), Hardware: hw}
	}
	c1 := &Hardware{CPUs: 32, Boards: 1, Sockets: 1, CoresPerSocket: 16, ThreadsPerCore: 2, RealMemoryMiB: 128543,
		GPUs: []GPU{{Type: "rtx3090", File: "/dev/nvidia0"}, {Type: "rtx3090", File: "/dev/nvidia1"}}}
	c2 := &Hardware{CPUs: 8, Boards: 1, Sockets: 1, CoresPerSocket: 4, ThreadsPerCore: 2, RealMemoryMiB: 31848}
	c := Cluster{
		Name: "lab", Domain: "lab",
		Subnet:     netip.MustParsePrefix("10.80.0.0/24"),
		Gateway:    netip.MustParseAddr("10.80.0.1"),
		DNS:        []netip.Addr{netip.MustParseAddr("10.80.0.1")},
		BootdURL:   "http://10.80.0.1",
		NTPServers: []string{"2.rocky.pool.ntp.org"},
		// Power saving on: the golden slurm.conf shows its block.
		Slurm: SlurmOptions{SuspendTime: 30 * time.Minute},
		Users: []User{
			{Name: "alice", UID: 2001, Comment: "Alice Example", Shell: "/bin/bash",
				SSHKeys: []string{"ssh-ed25519 ALICE-LAPTOP alice@laptop", "ssh-ed25519 ALICE-DESKTOP alice@desktop"}},
			{Name: "bob", UID: 2002, Shell: "/bin/zsh"},
		},
		// Out of order on purpose: Render sorts master first, then c1, c2, c3.
		Nodes: []Node{node("c3", RoleCompute, 103, nil), node("c1", RoleCompute, 101, c1),
			node("master", RoleMaster, 100, nil), node("c2", RoleCompute, 102, c2)},
		Secrets: Secrets{
			MungeKey:        bytes.Repeat([]byte("MUNGE-KEY-"), 100),
			RootPublicKey:   "ssh-ed25519 ROOT-PUBLIC root@lab",
			HostCAPublic:    "ssh-ed25519 HOST-CA-PUBLIC host-ca@cluster",
			RootPrivateKey:  "-----BEGIN OPENSSH PRIVATE KEY-----\nROOT-PRIVATE\n-----END OPENSSH PRIVATE KEY-----\n",
			HostKeys:        map[string]HostKeys{},
			RevokedHostKeys: []string{"ssh-ed25519 REVOKED-C2-OLD", "ssh-rsa REVOKED-C2-OLD-RSA"},
		},
	}
	for _, n := range c.Nodes {
		c.Secrets.HostKeys[n.Name] = fakeHostKeys(n.Name)
	}
	return c
}

var referenceNodes = []string{"master", "c1", "c2", "c3"}

func render(t *testing.T, c Cluster, node string) []File {
	t.Helper()
	files, err := Render(templatesDir, c, node)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestGolden(t *testing.T) {
	for _, node := range referenceNodes {
		t.Run(node, func(t *testing.T) {
			files := render(t, reference(), node)
			dir := filepath.Join("testdata", "golden", node)
			if golden.Update() {
				if err := os.RemoveAll(dir); err != nil { // a file no longer rendered goes too
					t.Fatal(err)
				}
			}
			golden.Check(t, dir+".list", listing(files))
			for _, f := range files {
				golden.Check(t, filepath.Join(dir, filepath.FromSlash(f.Path)), f.Data)
			}
		})
	}
}

// listing is one line per file: mode, owner, group, secret flag and path;
// it is golden too, so a changed mode or owner shows in review.
func listing(files []File) []byte {
	var b bytes.Buffer
	for _, f := range files {
		fmt.Fprintf(&b, "%04o %d:%d secret=%t %s\n", f.Mode, f.UID, f.GID, f.Secret, f.Path)
	}
	return b.Bytes()
}

// TestSecretsStayHome renders every node and checks that no file holds
// another node's host private key or, on a compute, root's private key; and
// that Public leaves out every private key and the munge key.
func TestSecretsStayHome(t *testing.T) {
	c := reference()
	for _, node := range referenceNodes {
		files := render(t, c, node)
		all := concat(files)
		public := concat(Public(files))
		t.Run(node+"/others' host keys", func(t *testing.T) {
			for other, keys := range c.Secrets.HostKeys {
				for _, k := range keys {
					if other != node && bytes.Contains(all, []byte(k.Private)) {
						t.Errorf("%s's files hold %s's %s host private key", node, other, k.Type)
					}
				}
			}
		})
		t.Run(node+"/root private key", func(t *testing.T) {
			has := bytes.Contains(all, []byte(c.Secrets.RootPrivateKey))
			if has != (node == "master") {
				t.Errorf("root private key present: %t", has)
			}
		})
		t.Run(node+"/public files", func(t *testing.T) {
			for _, secret := range secretStrings(c) {
				if bytes.Contains(public, []byte(secret)) {
					t.Errorf("Public(...) holds secret %.40q", secret)
				}
			}
		})
	}
}

func concat(files []File) []byte {
	var b bytes.Buffer
	for _, f := range files {
		b.Write(f.Data)
	}
	return b.Bytes()
}

func secretStrings(c Cluster) []string {
	s := []string{string(c.Secrets.MungeKey), c.Secrets.RootPrivateKey}
	for _, keys := range c.Secrets.HostKeys {
		for _, k := range keys {
			s = append(s, k.Private)
		}
	}
	return s
}

func TestModesAndOwners(t *testing.T) {
	want := map[string]File{
		"/etc/munge/munge.key":                                    {Mode: 0o400, UID: 900, GID: 900, Secret: true},
		"/etc/ssh/ssh_host_ed25519_key":                           {Mode: 0o600, Secret: true},
		"/etc/ssh/ssh_host_ed25519_key.pub":                       {Mode: 0o644},
		"/etc/NetworkManager/system-connections/lab.nmconnection": {Mode: 0o600},
		"/root/.ssh/authorized_keys":                              {Mode: 0o600},
		"/root/.ssh/id_ed25519":                                   {Mode: 0o600, Secret: true},
		"/etc/slurm/slurm.conf":                                   {Mode: 0o644},
	}
	for _, node := range referenceNodes {
		for _, f := range render(t, reference(), node) {
			t.Run(node+f.Path, func(t *testing.T) {
				if f.Secret && f.Mode&0o077 != 0 {
					t.Errorf("secret file with mode %04o", f.Mode)
				}
				w, ok := want[f.Path]
				if ok && (f.Mode != w.Mode || f.UID != w.UID || f.GID != w.GID || f.Secret != w.Secret) {
					t.Errorf("got %04o %d:%d secret=%t, want %04o %d:%d secret=%t",
						f.Mode, f.UID, f.GID, f.Secret, w.Mode, w.UID, w.GID, w.Secret)
				}
			})
		}
	}
}

func TestSortedByPath(t *testing.T) {
	files := render(t, reference(), "c1")
	for i := 1; i < len(files); i++ {
		if files[i-1].Path >= files[i].Path {
			t.Errorf("%s before %s", files[i-1].Path, files[i].Path)
		}
	}
}

func TestSlurmConfSameEverywhere(t *testing.T) {
	var first []byte
	for _, node := range referenceNodes {
		for _, f := range render(t, reference(), node) {
			if f.Path != "/etc/slurm/slurm.conf" {
				continue
			}
			if first == nil {
				first = f.Data
			} else if !bytes.Equal(f.Data, first) {
				t.Errorf("%s's slurm.conf differs from the master's: slurmctld would warn of a config hash mismatch", node)
			}
		}
	}
	t.Run("adding a node changes no master file", func(t *testing.T) {
		before := render(t, reference(), "master")
		c := reference()
		c4 := Node{Name: "c4", Role: RoleCompute, Address: netip.MustParseAddr("10.80.0.104"), MAC: "52:54:00:12:34:68"}
		c.Nodes = append(c.Nodes, c4)
		c.Secrets.HostKeys["c4"] = fakeHostKeys("c4")
		after := render(t, c, "master")
		for i := range before {
			if before[i].Path == "/etc/slurm/slurm.conf" && !bytes.Equal(before[i].Data, after[i].Data) {
				t.Error("slurm.conf changed when c4 joined")
			}
		}
	})
}

// TestMasterNTPServers: one pool line per upstream time source, none without any, and the
// master serves the subnet from its own clock either way.
func TestMasterNTPServers(t *testing.T) {
	for _, tt := range []struct {
		name    string
		servers []string
		want    []string
	}{
		{"none", nil, nil},
		{"reference lab", []string{"2.rocky.pool.ntp.org"}, []string{"pool 2.rocky.pool.ntp.org iburst"}},
		{"two", []string{"ntp1.lab.example", "192.0.2.7"}, []string{"pool ntp1.lab.example iburst", "pool 192.0.2.7 iburst"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := reference()
			c.NTPServers = tt.servers
			conf := string(fileData(t, c, "master", "/etc/chrony.conf"))
			var pools []string
			for _, line := range strings.Split(conf, "\n") {
				if strings.HasPrefix(line, "pool ") || strings.HasPrefix(line, "server ") {
					pools = append(pools, line)
				}
			}
			if !slices.Equal(pools, tt.want) {
				t.Errorf("sources %q, want %q\n%s", pools, tt.want, conf)
			}
			for _, line := range []string{"allow 10.80.0.0/24\n", "local stratum 10\n"} {
				if !strings.Contains(conf, line) {
					t.Errorf("no %q in\n%s", line, conf)
				}
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Cluster)
		node   string
		want   string
	}{
		{"unknown node", func(*Cluster) {}, "c9", "not in the cluster"},
		{"no host keys", func(c *Cluster) { delete(c.Secrets.HostKeys, "c2") }, "c2", "host key"},
		{"another node's keys missing", func(c *Cluster) { delete(c.Secrets.HostKeys, "c3") }, "c1", "no host keys for c3"},
		{"short munge key", func(c *Cluster) { c.Secrets.MungeKey = []byte("short") }, "c1", "munge key"},
		{"no root key", func(c *Cluster) { c.Secrets.RootPrivateKey = "" }, "master", "root private key"},
		{"two masters", func(c *Cluster) { c.Nodes[0].Role = RoleMaster }, "c1", "2 masters"},
		{"address outside subnet", func(c *Cluster) { c.Nodes[1].Address = netip.MustParseAddr("10.9.0.1") }, "c1", "not in subnet"},
		{"gpu type with a space", func(c *Cluster) { c.Nodes[1].Hardware.GPUs[0].Type = "rtx 3090" }, "c1", "not one word"},
		{"ntp server with an option", func(c *Cluster) { c.NTPServers = []string{"ntp.lab.example prefer"} }, "master", "not one host name"},
		{"ntp server with a directive", func(c *Cluster) { c.NTPServers = []string{"ntp.lab.example\nallow all"} }, "master", "not one host name"},
		{"empty ntp server", func(c *Cluster) { c.NTPServers = []string{""} }, "c1", "not one host name"},
		{"user comment with a colon", func(c *Cluster) { c.Users[0].Comment = "Alice: student" }, "c1", "one line of /etc/bootd/users"},
		{"user name with a newline", func(c *Cluster) { c.Users[1].Name = "bob\nroot" }, "c1", "one line of /etc/bootd/users"},
		{"user without a uid", func(c *Cluster) { c.Users[1].UID = 0 }, "master", "one line of /etc/bootd/users"},
		{"user name that is a path", func(c *Cluster) { c.Users[1].Name = "../root" }, "c1", "one line of /etc/bootd/users"},
		{"user key over two lines", func(c *Cluster) { c.Users[0].SSHKeys[1] = "ssh-ed25519 A\nbob ssh-ed25519 B" }, "c1", "line break"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := reference()
			tt.change(&c)
			_, err := Render(templatesDir, c, tt.node)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Render: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	t.Run("ErrUnknownNode", func(t *testing.T) {
		if _, err := Render(templatesDir, reference(), "c9"); !errors.Is(err, ErrUnknownNode) {
			t.Errorf("got %v", err)
		}
	})
}

// TestIndexMatchesTemplates: every template in overlays/ is listed in the
// index and every listed one exists, on disk and in the embedded copy.
func TestIndexMatchesTemplates(t *testing.T) {
	for name, fsys := range map[string]fs.FS{"disk": templatesDir, "embedded": overlays.FS} {
		t.Run(name, func(t *testing.T) {
			listed, err := templateNames(fsys)
			if err != nil {
				t.Fatal(err)
			}
			var present []string
			fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() && isTemplate(p) {
					present = append(present, p)
				}
				return err
			})
			if strings.Join(listed, "\n") != strings.Join(present, "\n") {
				t.Errorf("index lists:\n%s\noverlays/ holds:\n%s", strings.Join(listed, "\n"), strings.Join(present, "\n"))
			}
		})
	}
}
