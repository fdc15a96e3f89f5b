package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestNTPServersValid: what the master's chrony.conf can take as one pool name.
func TestNTPServersValid(t *testing.T) {
	for _, tt := range []struct {
		servers []string
		ok      bool
	}{
		{nil, true},
		{[]string{}, true},
		{[]string{"2.rocky.pool.ntp.org"}, true},
		{[]string{"ntp1.lab.example", "192.0.2.7", "2001:db8::7", "NTP-A"}, true},
		{[]string{""}, false},
		{[]string{" pool.ntp.org"}, false},
		{[]string{"pool.ntp.org iburst"}, false},
		{[]string{"pool.ntp.org\nallow"}, false},
		{[]string{"pool.ntp.org."}, false},
		{[]string{"ntp_1.lab"}, false},
		{[]string{"ok.example", "-bad.example"}, false},
	} {
		t.Run(strings.Join(tt.servers, ","), func(t *testing.T) {
			c := Default()
			c.Master.NTPServers = tt.servers
			if err := c.Validate(netip.Addr{}); (err == nil) != tt.ok {
				t.Errorf("Validate(ntp_servers %q) = %v, want ok=%t", tt.servers, err, tt.ok)
			}
		})
	}
}

func TestDefaultValidates(t *testing.T) {
	if err := Default().Validate(netip.MustParseAddr("10.80.0.1")); err != nil {
		t.Errorf("Default().Validate(10.80.0.1) = %v", err)
	}
	if err := Default().Validate(netip.Addr{}); err != nil {
		t.Errorf("Default().Validate(zero) = %v", err)
	}
}

func TestValidateServer(t *testing.T) {
	withGateway := gatewayAt("10.80.0.1")
	tests := []struct {
		name   string
		c      Config
		server string
		want   string // "" = valid
	}{
		{"free address", Default(), "10.80.0.1", ""},
		{"just below master", Default(), "10.80.0.99", ""},
		{"just above pool", Default(), "10.80.0.250", ""},
		{"outside subnet", Default(), "10.81.0.1",
			"network.subnet: bootd's own address 10.81.0.1 is outside subnet 10.80.0.0/24: serve on an interface in the subnet, or change the subnet"},
		{"network address", Default(), "10.80.0.0",
			"network.subnet: bootd's own address 10.80.0.0 is the network or broadcast address of 10.80.0.0/24"},
		{"broadcast address", Default(), "10.80.0.255",
			"network.subnet: bootd's own address 10.80.0.255 is the network or broadcast address of 10.80.0.0/24"},
		{"ipv6", Default(), "fd00::1", "network.subnet: bootd's own address fd00::1 is not IPv4"},
		{"master", Default(), "10.80.0.100",
			"master.address: bootd's own address 10.80.0.100 is taken by the master (10.80.0.100): give the interface another address, or move the range"},
		{"compute", Default(), "10.80.0.150",
			"compute.max_nodes: bootd's own address 10.80.0.150 is taken by compute nodes c1..c99 (10.80.0.101-10.80.0.199): give the interface another address, or move the range"},
		{"pool", Default(), "10.80.0.249",
			"discovery.pool_end: bootd's own address 10.80.0.249 is taken by the discovery pool (10.80.0.200-10.80.0.249): give the interface another address, or move the range"},
		// An appliance that routes for the lab is the lab's gateway: nothing is handed out there.
		{"gateway", withGateway, "10.80.0.1", ""},
		{"gateway elsewhere", withGateway, "10.80.0.2", ""},
		{"pool, with a gateway", withGateway, "10.80.0.200",
			"discovery.pool_end: bootd's own address 10.80.0.200 is taken by the discovery pool (10.80.0.200-10.80.0.249): give the interface another address, or move the range"},
		{"gateway in the pool", gatewayAt("10.80.0.210"), "10.80.0.210",
			"network.gateway: the gateway (10.80.0.210) and the discovery pool (10.80.0.200-10.80.0.249) overlap"},
		{"gateway at the master", gatewayAt("10.80.0.100"), "10.80.0.100",
			"network.gateway: the gateway (10.80.0.100) and the master (10.80.0.100) overlap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate(netip.MustParseAddr(tt.server))
			checkErr(t, err, tt.want)
		})
	}
}

func gatewayAt(a string) Config {
	c := Default()
	c.Network.Gateway = netip.MustParseAddr(a)
	return c
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("error %q, want none", err)
	case want != "" && err == nil:
		t.Errorf("no error, want %q", want)
	case want != "" && err.Error() != want:
		t.Errorf("error\n got %q\nwant %q", err, want)
	}
}

// TestValidateInCode covers configs built in code, whose errors name the
// key only.
func TestValidateInCode(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no subnet", func(c *Config) { c.Network.Subnet = netip.Prefix{} }, "network.subnet: missing"},
		{"no master address", func(c *Config) { c.Master.Address = netip.Addr{} }, "master.address: missing"},
		{"empty state dir", func(c *Config) { c.StateDir = "" }, "state_dir: must not be empty"},
		{"empty images dir", func(c *Config) { c.ImagesDir = "" }, "images_dir: must not be empty"},
		{"empty image", func(c *Config) { c.Compute.Image = "" }, `compute.image: "" is not an image name (want letters, digits, '.', '_' and '-')`},
		{"names too long", func(c *Config) { c.Compute.Prefix = "n" + strings.Repeat("x", 61) },
			"compute.max_nodes: node name n" + strings.Repeat("x", 61) + "99 would be longer than 63 characters"},
		{"dns ipv6", func(c *Config) { c.Network.DNS = []netip.Addr{netip.MustParseAddr("::1")} }, "network.dns: item 1: ::1 is not an IPv4 address"},
		{"compute past ipv4", func(c *Config) {
			c.Network.Subnet = netip.MustParsePrefix("255.255.255.0/24")
			c.Master.Address = netip.MustParseAddr("255.255.255.1")
			c.Discovery.PoolStart = netip.MustParseAddr("255.255.255.2")
			c.Discovery.PoolEnd = netip.MustParseAddr("255.255.255.3")
			c.Compute.FirstAddress = netip.MustParseAddr("255.255.255.10")
			c.Compute.MaxNodes = 1 << 40
		}, "compute.max_nodes: 1099511627776 compute nodes from 255.255.255.10 do not fit in subnet 255.255.255.0/24"},
		{"ntp server with a comment", func(c *Config) { c.Master.NTPServers = []string{"ntp.lab.example#x"} },
			`master.ntp_servers: item 1: "ntp.lab.example#x" is not a host name or IP address (want one NTP server or pool per item, e.g. "2.rocky.pool.ntp.org")`},
		{"ntp server with a zone", func(c *Config) { c.Master.NTPServers = []string{"fe80::1%eth0"} },
			`master.ntp_servers: item 1: "fe80::1%eth0" is not a host name or IP address (want one NTP server or pool per item, e.g. "2.rocky.pool.ntp.org")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.edit(&c)
			err := c.Validate(netip.Addr{})
			checkErr(t, err, tt.want)
			var e *Error
			if errors.As(err, &e) && (e.File != "" || e.Line != 0) {
				t.Errorf("error %q names a file for a value set in code", err)
			}
		})
	}
}

// TestValidateOverride checks that a value a flag changed after Load is not
// blamed on the file, while values still as loaded are.
func TestValidateOverride(t *testing.T) {
	path := writeTemp(t, "state_dir = \"/srv/bootd\"\n\n[master]\naddress = \"10.80.0.90\"\n")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c.StateDir = ""
	checkErr(t, c.Validate(netip.Addr{}), "state_dir: must not be empty")

	c, _ = Load(path)
	c.Compute.FirstAddress = netip.MustParseAddr("10.80.0.90")
	checkErr(t, c.Validate(netip.Addr{}), path+":4: master.address: the master (10.80.0.90) and compute nodes c1..c99 (10.80.0.90-10.80.0.188) overlap")

	c, _ = Load(path)
	checkErr(t, c.Validate(netip.MustParseAddr("10.80.0.90")), path+":4: master.address: bootd's own address 10.80.0.90 is taken by the master (10.80.0.90): give the interface another address, or move the range")
}

// TestOverlapNamesBoth edits one or two lines of the example, where every key is set, and
// wants both ranges of an overlap named by file:line: key (written @key below). The range the
// edit moved away from its default comes first: it is where the admin is looking.
func TestOverlapNamesBoth(t *testing.T) {
	example, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		edits map[string]string // line of the example -> its replacement
		want  string
	}{
		{"pool start into the computes", map[string]string{`pool_start = "10.80.0.200"`: `pool_start = "10.80.0.150"`},
			"@discovery.pool_start: the discovery pool (10.80.0.150-10.80.0.249) and compute nodes c1..c99 (10.80.0.101-10.80.0.199, @compute.max_nodes) overlap"},
		{"master among the computes", map[string]string{`address = "10.80.0.100"`: `address = "10.80.0.150"`},
			"@master.address: the master (10.80.0.150) and compute nodes c1..c99 (10.80.0.101-10.80.0.199, @compute.max_nodes) overlap"},
		{"gateway inside the pool", map[string]string{`gateway = "10.80.0.1"`: `gateway = "10.80.0.210"`},
			"@network.gateway: the gateway (10.80.0.210) and the discovery pool (10.80.0.200-10.80.0.249, @discovery.pool_end) overlap"},
		{"gateway at the pool's start", map[string]string{`gateway = "10.80.0.1"`: `gateway = "10.80.0.200"`},
			"@network.gateway: the gateway (10.80.0.200) and the discovery pool (10.80.0.200-10.80.0.249, @discovery.pool_start) overlap"},
		{"computes into the pool", map[string]string{"max_nodes = 99": "max_nodes = 120"},
			"@compute.max_nodes: compute nodes c1..c120 (10.80.0.101-10.80.0.220) and the discovery pool (10.80.0.200-10.80.0.249, @discovery.pool_start) overlap"},
		{"computes down onto the master", map[string]string{`first_address = "10.80.0.101"`: `first_address = "10.80.0.90"`},
			"@compute.first_address: compute nodes c1..c99 (10.80.0.90-10.80.0.188) and the master (10.80.0.100, @master.address) overlap"},
		{"both moved: the later line leads", map[string]string{`pool_start = "10.80.0.200"`: `pool_start = "10.80.0.150"`, "max_nodes = 99": "max_nodes = 60"},
			"@compute.max_nodes: compute nodes c1..c60 (10.80.0.101-10.80.0.160) and the discovery pool (10.80.0.150-10.80.0.249, @discovery.pool_start) overlap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := string(example)
			for old, repl := range tt.edits {
				if strings.Count(text, "\n"+old+"\n") != 1 {
					t.Fatalf("the example has not exactly one line %q", old)
				}
				text = strings.Replace(text, "\n"+old+"\n", "\n"+repl+"\n", 1)
			}
			path := writeTemp(t, text)
			_, err := Load(path)
			want := regexp.MustCompile(`@([a-z_.]+)`).ReplaceAllStringFunc(tt.want, func(k string) string {
				return fmt.Sprintf("%s:%d: %s", path, lineOf(t, text, k[1:]), k[1:])
			})
			checkErr(t, err, want)
		})
	}
}

// lineOf finds the line of key (table.leaf) in a TOML text of [table] sections, independently
// of the loader whose positions are under test.
func lineOf(t *testing.T, text, key string) int {
	t.Helper()
	table, leaf, _ := strings.Cut(key, ".")
	in := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "[") {
			in = line == "["+table+"]"
		} else if in && strings.HasPrefix(line, leaf+" = ") {
			return i + 1
		}
	}
	t.Fatalf("no line sets %s", key)
	return 0
}
