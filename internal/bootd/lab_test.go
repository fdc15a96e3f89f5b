package bootd

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/power"
)

// TestViews serves the daemon's read-only views as its HTTP listener mounts them and follows a
// lab through them: a machine waiting (the page names the command that names it), then the same
// machine assigned and booting (page, service discovery and /metrics all see it).
func TestViews(t *testing.T) {
	d := testDaemon(t)
	mux := http.NewServeMux()
	for pattern, h := range d.views() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	const mac = "52:54:00:12:34:56"
	if _, _, err := d.inv.See(mac, inventory.Facts{Manufacturer: "QEMU", Product: "Standard PC", Platform: "pcbios", Arch: "i386"}); err != nil {
		t.Fatal(err)
	}
	page := get("/")
	for _, want := range []string{`data-mac="` + mac + `" data-state="waiting"`, "QEMU Standard PC", "pcbios/i386",
		"bootd assign master --mac " + mac, "at its discovery screen", "none: "} {
		if !strings.Contains(page, want) {
			t.Errorf("page with a machine waiting lacks %q", want)
		}
	}
	if m := get("/metrics"); !strings.Contains(m, "bootd_machines_waiting 1\n") || !strings.Contains(m, `bootd_image_info{image="compute",role="compute",version="none"} 1`) {
		t.Errorf("/metrics with a machine waiting and no image:\n%s", grepLines(m, "bootd_"))
	}

	if _, err := (controller{d}).Assign(ctl.AssignRequest{Name: "c4", MAC: mac}); err != nil {
		t.Fatal(err)
	}
	progress{d}.Fetching(netip.MustParseAddr("10.80.0.104"), "rootfs.squashfs")
	d.powered.record([]power.Result{{Node: "c4", Method: "ipmi", State: power.StateOn}})
	part := get("/?part=lab")
	for _, want := range []string{`data-node="c4" data-state="assigned"`, "fetching rootfs.squashfs", "No machine is waiting", `<td class="power">on</td>`} {
		if !strings.Contains(part, want) {
			t.Errorf("page after assign c4 lacks %q:\n%s", want, part)
		}
	}
	if sd := get("/api/v1/sd"); !strings.Contains(sd, `"targets":["10.80.0.104:9100"]`) || !strings.Contains(sd, `"node":"c4"`) {
		t.Errorf("service discovery after assign c4: %s", sd)
	}
	m := get("/metrics")
	for _, want := range []string{`bootd_nodes{role="compute",state="assigned"} 1`, "bootd_machines_waiting 0\n"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics after assign c4 lacks %q:\n%s", want, grepLines(m, "bootd_"))
		}
	}
	if _, err := (controller{d}).Unassign("c4"); err != nil {
		t.Fatal(err)
	}
	if d.stages.get("c4").what != "" {
		t.Error("an unassigned name keeps its boot stage")
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
