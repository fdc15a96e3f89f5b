// Package metrics is bootd's own Prometheus metrics: what its listeners count (DHCP, TFTP, HTTP,
// overlay renders, refused node requests) and what its inventory holds (nodes by role and state,
// machines waiting, the image version each role boots), on one registry served at /metrics.
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/labcluster/gpucluster/internal/tftpd"
)

// prometheus/client_golang is the Prometheus project's own Go library: its exposition format,
// content negotiation and the Go runtime and process collectors are what every Prometheus
// expects, and writing them again would buy nothing.

// Census is what the inventory holds at one moment, read at each scrape.
type Census struct {
	Nodes   []Node  // every assigned node
	Waiting int     // machines waiting to be named
	Leases  int     // discovery leases held (waiting machines, and ones still booting toward it)
	Images  []Image // the image version each role boots now
}

// Node is one assigned node's role and state.
type Node struct{ Role, State string }

// Image is the version a role boots; Version is "" while none verifies.
type Image struct{ Role, Image, Version string }

// Roles and States are the label values bootd_nodes always carries, with 0 where no node is:
// a dashboard's sum then never lacks a series.
var (
	Roles  = []string{"master", "compute"}
	States = []string{"assigned", "booting", "up", "ready"}
)

// Metrics holds bootd's collectors. Its methods are the hooks the listeners declare (dhcpd.Meter,
// httpd.Meter, tftpd.TransferMeter) and bootd's own; they are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	dhcp        *prometheus.CounterVec
	dhcpSeconds *prometheus.HistogramVec
	dhcpErrors  *prometheus.CounterVec
	http        *prometheus.CounterVec
	httpSeconds *prometheus.HistogramVec
	httpBytes   *prometheus.CounterVec
	refused     *prometheus.CounterVec
	boots       *prometheus.CounterVec
	renders     *prometheus.CounterVec
	renderTime  prometheus.Histogram

	mu   sync.Mutex
	tftp tftpd.Counts // every worker's, since bootd started
}

// Latency buckets (seconds): DHCP answers in microseconds to a few hundred milliseconds (an ARP
// probe, an fsync); HTTP from a script (sub-millisecond) to an image download (seconds, minutes).
var (
	dhcpBuckets   = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	httpBuckets   = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	renderBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
)

// New returns bootd's metrics; census is read at each scrape.
func New(census func() Census) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	f := factory{m.reg}
	m.dhcp = f.counter("bootd_dhcp_requests_total", "DHCP requests answered, by message type and reply (none: no answer).", "type", "reply")
	m.dhcpSeconds = f.histogram("bootd_dhcp_reply_duration_seconds", "Time from a parsed DHCP request to its reply sent (or given up), by message type.", dhcpBuckets, "type")
	m.dhcpErrors = f.counter("bootd_dhcp_errors_total", "DHCP failures: lease (pool exhausted or the inventory could not write), send, panic.", "kind")
	m.http = f.counter("bootd_http_requests_total", "HTTP requests by route (the ServeMux pattern; empty when none matched) and status.", "route", "code")
	m.httpSeconds = f.histogram("bootd_http_request_duration_seconds", "Time from an HTTP request to the end of its response, by route.", httpBuckets, "route")
	m.httpBytes = f.counter("bootd_http_response_bytes_total", "HTTP response bytes sent, by route (image files and iPXE binaries included).", "route")
	m.refused = f.counter("bootd_node_requests_refused_total", "Requests to the node API refused, by endpoint (overlay: a node's secrets; hardware report; kickstart) and reason (forbidden: not from the node's address, a privileged port and its MAC).", "endpoint", "reason")
	m.boots = f.counter("bootd_boot_scripts_total", "Boot scripts sent to assigned nodes, by role and the image version they boot.", "role", "image", "version")
	m.renders = f.counter("bootd_overlay_renders_total", "Node overlays rendered, by result (ok, error).", "result")
	m.renderTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bootd_overlay_render_duration_seconds", Help: "Time to render one node's overlay.", Buckets: renderBuckets})
	m.reg.MustRegister(m.renderTime, censusCollector{census}, tftpCollector{m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in Prometheus's exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// DHCPExchange implements dhcpd.Meter.
func (m *Metrics) DHCPExchange(request, reply string, took time.Duration) {
	m.dhcp.WithLabelValues(request, reply).Inc()
	m.dhcpSeconds.WithLabelValues(request).Observe(took.Seconds())
}

// DHCPError implements dhcpd.Meter.
func (m *Metrics) DHCPError(kind string) { m.dhcpErrors.WithLabelValues(kind).Inc() }

// HTTPRequest implements httpd.Meter.
func (m *Metrics) HTTPRequest(route string, code int, took time.Duration, bytes int64) {
	m.http.WithLabelValues(route, statusCode(code)).Inc()
	m.httpSeconds.WithLabelValues(route).Observe(took.Seconds())
	m.httpBytes.WithLabelValues(route).Add(float64(bytes))
}

// NodeRequestRefused implements httpd.Meter.
func (m *Metrics) NodeRequestRefused(endpoint, reason string) {
	m.refused.WithLabelValues(endpoint, reason).Inc()
}

// TFTPTransfers implements tftpd.TransferMeter.
func (m *Metrics) TFTPTransfers(c tftpd.Counts) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tftp = c
}

// BootScript counts a boot script sent to a node of role, booting image at version. A nil
// Metrics counts nothing (here and in OverlayRendered).
func (m *Metrics) BootScript(role, image, version string) {
	if m == nil {
		return
	}
	m.boots.WithLabelValues(role, image, version).Inc()
}

// OverlayRendered counts one node overlay's render.
func (m *Metrics) OverlayRendered(err error, took time.Duration) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.renders.WithLabelValues(result).Inc()
	m.renderTime.Observe(took.Seconds())
}

// statusCode is a status for a label: three digits, so that a handler's odd status cannot add
// series without end.
func statusCode(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code)
}

// factory makes and registers vectors.
type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}
