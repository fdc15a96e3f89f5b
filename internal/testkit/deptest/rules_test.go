package deptest

import (
	"strings"
	"testing"
)

const module = "github.com/labcluster/gpucluster/"

func pkgs(names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = module + n
	}
	return out
}

// builder are the image builder's packages, server the appliance's: docs/ARCHITECTURE.md's
// "Build side" and "Server side".
var (
	builder = pkgs("internal/spec", "internal/resolve", "internal/rpmcmd", "internal/rootfs", "internal/pack",
		"internal/child", "internal/sandbox", "internal/imgbuild")
	server = pkgs("internal/bootd", "internal/dhcpd", "internal/tftpd", "internal/httpd", "internal/inventory",
		"internal/secrets", "internal/ctl", "internal/config", "internal/overlay", "overlays",
		"internal/power", "internal/hostlist", "internal/check", "internal/masterssh", "internal/metrics", "internal/labview",
		"internal/bootphase", "internal/ratelog", "internal/neigh", "internal/arpprobe")
)

// rules are docs/ARCHITECTURE.md's import rules.
var rules = []Rule{
	{"bootd uses nothing of the test wing", module + "cmd/bootd", pkgs("internal/testkit")},
	{"imgbuild uses nothing of the test wing", module + "cmd/imgbuild", pkgs("internal/testkit")},
	{"bootd links no builder package", module + "cmd/bootd", builder},
	{"bootd links no chunking code: it serves chunks as files", module + "cmd/bootd", pkgs("internal/castr", "internal/rootfetch")},
	{"bootd-fetch uses nothing of the test wing", module + "cmd/bootd-fetch", pkgs("internal/testkit")},
	{"bootd-fetch, run in a node's initramfs, links no server or builder package", module + "cmd/bootd-fetch", append(append([]string{}, server...), builder...)},
	{"imgbuild links no server package", module + "cmd/imgbuild", server},
	{"dhcpd imports no other listener, nor inventory or secrets", module + "internal/dhcpd",
		pkgs("internal/tftpd", "internal/httpd", "internal/inventory", "internal/secrets")},
	{"tftpd imports no other listener, nor inventory or secrets", module + "internal/tftpd",
		pkgs("internal/dhcpd", "internal/httpd", "internal/inventory", "internal/secrets")},
	{"httpd imports no other listener, nor inventory or secrets", module + "internal/httpd",
		pkgs("internal/dhcpd", "internal/tftpd", "internal/inventory", "internal/secrets")},
	// The page and /metrics are read-only and carry no secret: they cannot reach one.
	{"labview sees a snapshot only: no inventory, secrets or overlays", module + "internal/labview",
		pkgs("internal/inventory", "internal/secrets", "internal/overlay", "internal/httpd")},
	{"metrics sees counts only: no inventory or secrets", module + "internal/metrics",
		pkgs("internal/inventory", "internal/secrets", "internal/overlay")},
}

func TestImportRules(t *testing.T) {
	var from []string
	for _, r := range rules {
		from = append(from, r.From)
	}
	g, err := Load(from...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		t.Run(r.Name, func(t *testing.T) {
			if _, ok := g[r.From]; !ok {
				t.Fatalf("go list did not list %s", r.From)
			}
			if v := g.Violations(r); len(v) > 0 {
				t.Errorf("forbidden imports (move the code, or declare a small interface where it is consumed):\n%s",
					strings.Join(v, "\n"))
			}
		})
	}
}
