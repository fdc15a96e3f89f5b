package bootd

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/inventory"
)

// TestRendererNTPServers: [master] ntp_servers reaches the master's chrony.conf, and an empty
// list leaves the master on its own clock with no line pointing outside the lab.
func TestRendererNTPServers(t *testing.T) {
	for _, tt := range []struct {
		name    string
		servers []string
		want    string // the conf's source lines, joined
	}{
		{"default", nil, "pool 2.rocky.pool.ntp.org iburst"},
		{"lab servers", []string{"ntp1.lab.example", "192.0.2.7"}, "pool ntp1.lab.example iburst|pool 192.0.2.7 iburst"},
		{"none", []string{}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := testDaemon(t)
			if tt.servers != nil {
				d.cfg.Master.NTPServers = tt.servers
			}
			files, err := d.renderer().Render(nil, "master")
			if err != nil {
				t.Fatal(err)
			}
			var conf string
			for _, f := range files {
				if f.Path == "/etc/chrony.conf" {
					conf = string(f.Data)
				}
			}
			var sources []string
			for _, line := range strings.Split(conf, "\n") {
				if strings.HasPrefix(line, "pool ") || strings.HasPrefix(line, "server ") {
					sources = append(sources, line)
				}
			}
			if got := strings.Join(sources, "|"); got != tt.want || !strings.Contains(conf, "\nlocal stratum 10\n") {
				t.Errorf("master's chrony.conf sources %q, want %q (and local stratum 10):\n%s", got, tt.want, conf)
			}
		})
	}
}

// TestRendererUsers: [users.NAME] reach every node's /etc/bootd/users and /etc/bootd/authorized_keys
// (master and computes alike), and without any the files list none.
func TestRendererUsers(t *testing.T) {
	alice := config.User{Name: "alice", UID: 2001, Comment: "Alice", Shell: "/bin/bash", SSHKeys: []string{"ssh-ed25519 AAAA alice@laptop"}}
	for _, tt := range []struct {
		name      string
		users     []config.User
		wantUsers string // the files' lines that are not comments, joined
		wantKeys  string
	}{
		{"none", nil, "", ""},
		{"alice", []config.User{alice}, "alice:2001:Alice:/bin/bash", "alice ssh-ed25519 AAAA alice@laptop"},
	} {
		for _, node := range []string{"master", "c1"} {
			t.Run(tt.name+" on "+node, func(t *testing.T) {
				d := testDaemon(t)
				d.cfg.Users = tt.users
				c1 := inventory.Node{Name: "c1", Role: "compute", MAC: "52:54:00:00:00:01", Address: netip.MustParseAddr("10.80.0.101")}
				files, err := d.renderer().Render([]inventory.Node{c1}, node)
				if err != nil {
					t.Fatal(err)
				}
				lines := map[string]string{}
				for _, f := range files {
					var kept []string
					for _, l := range strings.Split(strings.TrimSpace(string(f.Data)), "\n") {
						if !strings.HasPrefix(l, "#") {
							kept = append(kept, l)
						}
					}
					lines[f.Path] = strings.Join(kept, "|")
				}
				// Both files come also without users: bootd-node removes the accounts it made.
				for path, want := range map[string]string{"/etc/bootd/users": tt.wantUsers, "/etc/bootd/authorized_keys": tt.wantKeys} {
					if got, ok := lines[path]; !ok || got != want {
						t.Errorf("%s (rendered %v) lists %q, want %q", path, ok, got, want)
					}
				}
			})
		}
	}
}
