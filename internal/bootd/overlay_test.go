package bootd

import (
	"strings"
	"testing"
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
