package config

import (
	"errors"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/labcluster/gpucluster/internal/testkit/golden"
)

// TestLoadErrors loads every testdata/bad/*.toml and compares the error
// with the golden .err file beside it.
func TestLoadErrors(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".toml"), func(t *testing.T) {
			_, err := Load(file)
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			checkLocated(t, err, file)
			golden.Check(t, strings.TrimSuffix(file, ".toml")+".err", []byte(err.Error()+"\n"))
		})
	}
}

// checkLocated wants an *Error naming file, line and (but for some syntax
// errors) key.
func checkLocated(t *testing.T, err error, file string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is a %T, want *Error", err, err)
	}
	if e.File != file || e.Line < 1 {
		t.Errorf("error %q is not located in %s", err, file)
	}
	if e.Key == "" && !strings.Contains(file, "syntax") {
		t.Errorf("error %q names no key", err)
	}
}

// exampleFile is the commented reference of every key that admins copy from.
const exampleFile = "../../dist/bootd.example.toml"

// TestLoadExample: the reference loads, validates, and sets the values its comments promise.
func TestLoadExample(t *testing.T) {
	got, err := Load(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Interface = "eth1"
	want.IPXEDir = "/usr/lib/ipxe"
	want.FetchProgram = "/usr/libexec/bootd/bootd-fetch"
	want.Network.Gateway = netip.MustParseAddr("10.80.0.1")
	want.Network.DNS = []netip.Addr{netip.MustParseAddr("10.80.0.1")}
	want.Network.Domain = "lab.example"
	want.Users = []User{{Name: "alice", UID: 2001, Comment: "Alice Example", Shell: "/bin/bash",
		SSHKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKYn3pm2E8RDgg3QSPW9dCWbzvUxsjqpCJusmxRP2MhS alice@laptop"}}}
	want.BMC.Nodes = []BMC{{Node: "c1", Protocol: "ipmi", Address: "10.80.1.101", User: "ADMIN"}}
	want.UEFI.SNPOnly = []string{"00:1b:21", "52:54:00:12:34:56"}
	want.NodeImages = map[string]string{"c7": "compute-legacy"}
	want.Disks = []Disk{{Name: "scratch", Use: []string{"scratch"}, Roles: []string{"compute"}, Nodes: []string{}, Serial: "S4EWNX0R123456",
		Model: "Samsung_SSD_870*", Path: "", MinSize: 200 << 30, MaxSize: 0, Wipe: false}}
	assertConfig(t, got, want)
	// README's appliance, 10.80.0.1, is the example's gateway too: it routes for the lab.
	if err := got.Validate(netip.MustParseAddr("10.80.0.1")); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

// TestExampleDocumentsEveryKey keeps the reference in step with the loader: every key Load
// accepts, as its own tables list them (fields, tables, userFields), must be set in the
// example. The other way round needs no check here: Load refuses a key it does not know, and
// TestLoadExample loads the example.
func TestExampleDocumentsEveryKey(t *testing.T) {
	c, err := Load(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	documented := exampleKeys(c)
	for _, k := range acceptedKeys() {
		t.Run(k, func(t *testing.T) {
			if !slices.ContainsFunc(documented, func(d string) bool { return d == k || strings.HasPrefix(d, k+".") }) {
				t.Errorf("%s does not set %s, which Load accepts: add it with its default and what it is for", exampleFile, k)
			}
		})
	}
}

// acceptedKeys lists what Load knows, a user's table as users.NAME.
func acceptedKeys() []string {
	keys := append(slices.Collect(maps.Keys(fields)), tables...)
	for k := range userFields {
		keys = append(keys, "users.NAME."+k)
	}
	for k := range bmcDefaults {
		keys = append(keys, "bmc."+k)
	}
	for k := range bmcFields {
		keys = append(keys, "bmc.NAME."+k)
	}
	for k := range diskFields {
		keys = append(keys, "disks.NAME."+k)
	}
	return sorted(keys)
}

// exampleKeys lists the keys Load found in the file c came from, each user's name as NAME.
func exampleKeys(c Config) []string {
	var keys []string
	for k := range c.origin.lines {
		for _, u := range c.Users {
			if user := (toml.Key{"users", u.Name}).String(); k == user || strings.HasPrefix(k, user+".") {
				k = "users.NAME" + strings.TrimPrefix(k, user)
			}
		}
		for _, b := range c.BMC.Nodes {
			if node := (toml.Key{"bmc", b.Node}).String(); k == node || strings.HasPrefix(k, node+".") {
				k = "bmc.NAME" + strings.TrimPrefix(k, node)
			}
		}
		for _, d := range c.Disks {
			if disk := (toml.Key{"disks", d.Name}).String(); k == disk || strings.HasPrefix(k, disk+".") {
				k = "disks.NAME" + strings.TrimPrefix(k, disk)
			}
		}
		keys = append(keys, k)
	}
	return keys
}

// assertConfig compares configs without their origin.
func assertConfig(t *testing.T, got, want Config) {
	t.Helper()
	got.origin, want.origin = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config:\n got %+v\nwant %+v", got, want)
	}
}

func TestLoadOverlay(t *testing.T) {
	tests := []struct {
		name string
		file string
		edit func(*Config)
	}{
		{"empty", "", func(*Config) {}},
		{"comments only", "# nothing\n\n", func(*Config) {}},
		{"one key", "[compute]\nmax_nodes = 24\n", func(c *Config) { c.Compute.MaxNodes = 24 }},
		{"no gateway spelled out", "[network]\ngateway = \"\"\n", func(*Config) {}},
		{"empty dns", "[network]\ndns = []\n", func(c *Config) { c.Network.DNS = []netip.Addr{} }},
		{"no upstream time", "[master]\nntp_servers = []\n", func(c *Config) { c.Master.NTPServers = []string{} }},
		{"own time servers", "[master]\nntp_servers = [\"ntp1.lab.example\", \"192.0.2.7\"]\n",
			func(c *Config) { c.Master.NTPServers = []string{"ntp1.lab.example", "192.0.2.7"} }},
		{"inline table", "discovery = { lease_time = \"5m\" }\n", func(c *Config) { c.Discovery.LeaseTime = 5 * time.Minute }},
		{"dotted key", "master.version = \"2024.06.1\"\n", func(c *Config) { c.Master.Version = "2024.06.1" }},
		{"BMCs take the defaults, also ones set after them", "[bmc.c2]\naddress = \"10.80.1.2\"\n[bmc.c1]\naddress = \"bmc1:6230\"\nuser = \"op\"\n[bmc]\nprotocol = \"redfish\"\nuser = \"root\"\n",
			func(c *Config) {
				c.BMC = BMCs{User: "root", Protocol: "redfish", Nodes: []BMC{
					{Node: "c2", Protocol: "redfish", Address: "10.80.1.2", User: "root"},
					{Node: "c1", Protocol: "redfish", Address: "bmc1:6230", User: "op"}}}
			}},
		{"power saving", "[slurm]\nsuspend_time = \"30m\"\nresume_timeout = \"15m\"\n",
			func(c *Config) { c.Slurm.SuspendTime, c.Slurm.ResumeTimeout = 30*time.Minute, 15*time.Minute }},
		{"users", "[users.bob]\nuid = 2002\n\n[users.alice]\nuid = 2001\nshell = \"/bin/zsh\"\n",
			func(c *Config) {
				c.Users = []User{{Name: "bob", UID: 2002, Shell: "/bin/bash"}, {Name: "alice", UID: 2001, Shell: "/bin/zsh"}}
			}},
		{"users inline and dotted", "users.bob.uid = 2002\n[users]\nalice = { uid = 2001, comment = \"Alice\" }\n",
			func(c *Config) {
				c.Users = []User{{Name: "bob", UID: 2002, Shell: "/bin/bash"}, {Name: "alice", UID: 2001, Comment: "Alice", Shell: "/bin/bash"}}
			}},
		{"other lab", "[network]\nsubnet = \"192.168.7.0/24\"\n[discovery]\npool_start = \"192.168.7.200\"\npool_end = \"192.168.7.220\"\n" +
			"[master]\naddress = \"192.168.7.10\"\n[compute]\nprefix = \"node\"\nfirst_address = \"192.168.7.11\"\nmax_nodes = 40\n",
			func(c *Config) {
				c.Network.Subnet = netip.MustParsePrefix("192.168.7.0/24")
				c.Discovery.PoolStart = netip.MustParseAddr("192.168.7.200")
				c.Discovery.PoolEnd = netip.MustParseAddr("192.168.7.220")
				c.Master.Address = netip.MustParseAddr("192.168.7.10")
				c.Compute = ComputeRole{Prefix: "node", FirstAddress: netip.MustParseAddr("192.168.7.11"), MaxNodes: 40, Image: "compute"}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(writeTemp(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			want := Default()
			tt.edit(&want)
			assertConfig(t, got, want)
		})
	}
}

func writeTemp(t testing.TB, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bootd.toml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.toml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file: %v, want fs.ErrNotExist", err)
	}
	if err != nil && !strings.Contains(err.Error(), "nope.toml") {
		t.Errorf("error %q does not name the file", err)
	}
}

func TestSyntaxErrorUnwraps(t *testing.T) {
	_, err := Load("testdata/bad/syntax_string.toml")
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		t.Errorf("error %v does not wrap toml.ParseError", err)
	}
}

// TestFromFile: a key counts as the file's while it holds the value the file gave it.
func TestFromFile(t *testing.T) {
	path := writeTemp(t, "log_format = \"text\"\n")
	for _, tt := range []struct {
		name string
		key  string
		edit func(*Config)
		want bool
	}{
		{"set by the file, to the default's value", "log_format", func(*Config) {}, true},
		{"left to the default", "state_dir", func(*Config) {}, false},
		{"changed by a flag since", "log_format", func(c *Config) { c.LogFormat = "json" }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			tt.edit(&c)
			if got := c.FromFile(tt.key); got != tt.want {
				t.Errorf("FromFile(%q) = %t, want %t", tt.key, got, tt.want)
			}
		})
	}
	if Default().FromFile("log_format") {
		t.Error("Default().FromFile(log_format) = true: no file was read")
	}
}
