package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/labcluster/gpucluster/internal/tftpd"
)

var (
	nodesDesc   = prometheus.NewDesc("bootd_nodes", "Assigned nodes by role and state (assigned, booting, up, ready).", []string{"role", "state"}, nil)
	waitingDesc = prometheus.NewDesc("bootd_machines_waiting", "Machines that netbooted and wait to be named (bootd assign NAME --mac MAC).", nil, nil)
	leasesDesc  = prometheus.NewDesc("bootd_discovery_leases", "Discovery leases held in the pool.", nil, nil)
	imageDesc   = prometheus.NewDesc("bootd_image_info", "The image version each role boots now (1; version \"none\" while no version verifies).", []string{"role", "image", "version"}, nil)
)

// censusCollector reads the inventory at each scrape: gauges of what is, not counts of events.
type censusCollector struct{ census func() Census }

func (c censusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodesDesc
	ch <- waitingDesc
	ch <- leasesDesc
	ch <- imageDesc
}

func (c censusCollector) Collect(ch chan<- prometheus.Metric) {
	cs := c.census()
	count := map[[2]string]int{}
	for _, r := range Roles {
		for _, s := range States {
			count[[2]string{r, s}] = 0
		}
	}
	for _, n := range cs.Nodes {
		count[[2]string{n.Role, n.State}]++
	}
	for k, n := range count {
		ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(cs.Waiting))
	ch <- prometheus.MustNewConstMetric(leasesDesc, prometheus.GaugeValue, float64(cs.Leases))
	for _, img := range cs.Images {
		v := img.Version
		if v == "" {
			v = "none"
		}
		ch <- prometheus.MustNewConstMetric(imageDesc, prometheus.GaugeValue, 1, img.Role, img.Image, v)
	}
}

var (
	tftpTransfersDesc = prometheus.NewDesc("bootd_tftp_transfers_total", "TFTP read requests by file and outcome (done, failed, tsize_probe, refused, busy), as the TFTP worker counts them.", []string{"file", "outcome"}, nil)
	tftpBytesDesc     = prometheus.NewDesc("bootd_tftp_sent_bytes_total", "TFTP bytes sent, by file.", []string{"file"}, nil)
	tftpSecondsDesc   = prometheus.NewDesc("bootd_tftp_transfer_duration_seconds", "Duration of the TFTP transfers that sent their whole file.", nil, nil)
)

// tftpCollector serves the TFTP workers' counts, which reach bootd as totals (tftpd.Counts).
type tftpCollector struct{ m *Metrics }

func (c tftpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tftpTransfersDesc
	ch <- tftpBytesDesc
	ch <- tftpSecondsDesc
}

func (c tftpCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	counts := c.m.tftp
	c.m.mu.Unlock()
	files := append([]string{tftpd.NoFile}, tftpd.Allowed...)
	for _, o := range tftpd.Outcomes {
		for _, f := range files {
			if n := counts.Transfers[o][f]; n > 0 { // a series appears with its first transfer
				ch <- prometheus.MustNewConstMetric(tftpTransfersDesc, prometheus.CounterValue, float64(n), f, o)
			}
		}
	}
	for _, f := range tftpd.Allowed {
		if n := counts.Bytes[f]; n > 0 {
			ch <- prometheus.MustNewConstMetric(tftpBytesDesc, prometheus.CounterValue, float64(n), f)
		}
	}
	buckets := map[float64]uint64{}
	var cum uint64
	for i, bound := range tftpd.DurationBuckets {
		if i < len(counts.Buckets) {
			cum += counts.Buckets[i]
		}
		buckets[bound] = cum
	}
	total := cum
	if n := len(counts.Buckets); n == len(tftpd.DurationBuckets)+1 {
		total += counts.Buckets[n-1]
	}
	ch <- prometheus.MustNewConstHistogram(tftpSecondsDesc, total, counts.Seconds, buckets)
}
