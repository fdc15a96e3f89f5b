package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/labcluster/gpucluster/internal/tftpd"
)

func TestCounters(t *testing.T) {
	m := New(func() Census { return Census{} })
	m.DHCPExchange("discover", "offer", 2*time.Millisecond)
	m.DHCPExchange("discover", "offer", 3*time.Millisecond)
	m.DHCPExchange("request", "ack", time.Millisecond)
	m.DHCPError("lease")
	m.HTTPRequest("GET /images/{image}/{version}/{file}", 200, time.Second, 1000)
	m.HTTPRequest("GET /images/{image}/{version}/{file}", 200, time.Second, 500)
	m.HTTPRequest("", 404, time.Millisecond, 19)
	m.HTTPRequest("GET /x", 1234, time.Millisecond, 0)
	m.NodeRequestRefused("overlay", "forbidden")
	m.BootScript("compute", "compute", "2026.11.21-1")
	m.OverlayRendered(nil, time.Millisecond)
	m.OverlayRendered(errors.New("no"), time.Millisecond)
	want := `
# HELP bootd_dhcp_requests_total DHCP requests answered, by message type and reply (none: no answer).
# TYPE bootd_dhcp_requests_total counter
bootd_dhcp_requests_total{reply="ack",type="request"} 1
bootd_dhcp_requests_total{reply="offer",type="discover"} 2
# HELP bootd_dhcp_errors_total DHCP failures: lease (pool exhausted or the inventory could not write), send, panic.
# TYPE bootd_dhcp_errors_total counter
bootd_dhcp_errors_total{kind="lease"} 1
# HELP bootd_http_requests_total HTTP requests by route (the ServeMux pattern; empty when none matched) and status.
# TYPE bootd_http_requests_total counter
bootd_http_requests_total{code="200",route="GET /images/{image}/{version}/{file}"} 2
bootd_http_requests_total{code="404",route=""} 1
bootd_http_requests_total{code="other",route="GET /x"} 1
# HELP bootd_http_response_bytes_total HTTP response bytes sent, by route (image files and iPXE binaries included).
# TYPE bootd_http_response_bytes_total counter
bootd_http_response_bytes_total{route=""} 19
bootd_http_response_bytes_total{route="GET /images/{image}/{version}/{file}"} 1500
bootd_http_response_bytes_total{route="GET /x"} 0
# HELP bootd_node_requests_refused_total Requests to the node API refused, by endpoint (overlay: a node's secrets; hardware report; kickstart) and reason (forbidden: not from the node's address, a privileged port and its MAC).
# TYPE bootd_node_requests_refused_total counter
bootd_node_requests_refused_total{endpoint="overlay",reason="forbidden"} 1
# HELP bootd_boot_scripts_total Boot scripts sent to assigned nodes, by role and the image version they boot.
# TYPE bootd_boot_scripts_total counter
bootd_boot_scripts_total{image="compute",role="compute",version="2026.11.21-1"} 1
# HELP bootd_overlay_renders_total Node overlays rendered, by result (ok, error).
# TYPE bootd_overlay_renders_total counter
bootd_overlay_renders_total{result="error"} 1
bootd_overlay_renders_total{result="ok"} 1
`
	names := []string{"bootd_dhcp_requests_total", "bootd_dhcp_errors_total", "bootd_http_requests_total", "bootd_http_response_bytes_total",
		"bootd_node_requests_refused_total", "bootd_boot_scripts_total", "bootd_overlay_renders_total"}
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.dhcpSeconds); n != 2 {
		t.Errorf("%d DHCP latency histograms, want one per request type (2)", n)
	}
}

func TestCensus(t *testing.T) {
	census := Census{
		Nodes:   []Node{{"master", "ready"}, {"compute", "ready"}, {"compute", "ready"}, {"compute", "booting"}},
		Waiting: 2, Leases: 3,
		Images: []Image{{"master", "master", "2026.11.21-1"}, {"compute", "compute", ""}},
	}
	m := New(func() Census { return census })
	want := `
# HELP bootd_machines_waiting Machines that netbooted and wait to be named (bootd assign NAME --mac MAC).
# TYPE bootd_machines_waiting gauge
bootd_machines_waiting 2
# HELP bootd_discovery_leases Discovery leases held in the pool.
# TYPE bootd_discovery_leases gauge
bootd_discovery_leases 3
# HELP bootd_image_info The image version each role boots now (1; version "none" while no version verifies).
# TYPE bootd_image_info gauge
bootd_image_info{image="compute",role="compute",version="none"} 1
bootd_image_info{image="master",role="master",version="2026.11.21-1"} 1
# HELP bootd_nodes Assigned nodes by role and state (assigned, booting, up, ready).
# TYPE bootd_nodes gauge
bootd_nodes{role="compute",state="assigned"} 0
bootd_nodes{role="compute",state="booting"} 1
bootd_nodes{role="compute",state="ready"} 2
bootd_nodes{role="compute",state="up"} 0
bootd_nodes{role="master",state="assigned"} 0
bootd_nodes{role="master",state="booting"} 0
bootd_nodes{role="master",state="ready"} 1
bootd_nodes{role="master",state="up"} 0
`
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "bootd_machines_waiting", "bootd_discovery_leases", "bootd_image_info", "bootd_nodes"); err != nil {
		t.Error(err)
	}
}

func TestTFTP(t *testing.T) {
	m := New(func() Census { return Census{} })
	buckets := make([]uint64, len(tftpd.DurationBuckets)+1)
	buckets[1], buckets[len(buckets)-1] = 2, 1 // two within 10 ms, one above every bound
	m.TFTPTransfers(tftpd.Counts{
		Transfers: map[string]map[string]uint64{"done": {"undionly.kpxe": 3}, "refused": {"none": 4}, "tsize_probe": {"ipxe.efi": 1}},
		Bytes:     map[string]uint64{"undionly.kpxe": 3000},
		Buckets:   buckets, Seconds: 130.02,
	})
	want := `
# HELP bootd_tftp_transfers_total TFTP read requests by file and outcome (done, failed, tsize_probe, refused, busy), as the TFTP worker counts them.
# TYPE bootd_tftp_transfers_total counter
bootd_tftp_transfers_total{file="ipxe.efi",outcome="tsize_probe"} 1
bootd_tftp_transfers_total{file="none",outcome="refused"} 4
bootd_tftp_transfers_total{file="undionly.kpxe",outcome="done"} 3
`
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "bootd_tftp_transfers_total"); err != nil {
		t.Error(err)
	}
	body := scrape(t, m)
	for _, line := range []string{
		`bootd_tftp_transfer_duration_seconds_bucket{le="0.005"} 0`,
		`bootd_tftp_transfer_duration_seconds_bucket{le="0.01"} 2`,
		`bootd_tftp_transfer_duration_seconds_bucket{le="120"} 2`,
		`bootd_tftp_transfer_duration_seconds_bucket{le="+Inf"} 3`,
		`bootd_tftp_transfer_duration_seconds_count 3`,
		`bootd_tftp_sent_bytes_total{file="undionly.kpxe"} 3000`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}

// TestHandler scrapes as Prometheus does: bootd's series and the process's own are there.
func TestHandler(t *testing.T) {
	body := scrape(t, New(func() Census { return Census{Waiting: 1} }))
	for _, want := range []string{"bootd_machines_waiting 1\n", "go_goroutines ", "process_resident_memory_bytes "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	return string(b)
}
