package labview

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"strconv"
)

// Prometheus HTTP service discovery (http_sd_configs): a JSON list of target groups, each a list
// of "host:port" targets and their labels. Every assigned node is a target, whatever its state:
// a node that is off shows as up == 0, which is what "nodes up" wants to count.

// DefaultExporterPort is node_exporter's: the port the targets carry unless ?port= says another.
const DefaultExporterPort = 9100

// targetGroup is one entry of the service discovery answer.
type targetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// Targets are the lab's nodes as Prometheus targets at port. Labels: node (its name), role and
// gpus (the count it reported; absent until it reports) stay on the scraped series; its state,
// MAC and GPU type are meta labels (__meta_bootd_...), for relabelling only: a target label that
// changes at every boot (state) would start new series each time.
func Targets(lab Lab, port int) []targetGroup {
	out := make([]targetGroup, 0, len(lab.Nodes))
	for _, n := range lab.Nodes {
		labels := map[string]string{"node": n.Name, "role": n.Role, "__meta_bootd_state": n.State, "__meta_bootd_mac": n.MAC}
		if h := n.Hardware; h != nil {
			labels["gpus"] = strconv.Itoa(h.GPUs)
			if h.GPUType != "" {
				labels["__meta_bootd_gpu_type"] = h.GPUType
			}
		}
		target := netip.AddrPortFrom(n.Address, uint16(port)).String()
		out = append(out, targetGroup{Targets: []string{target}, Labels: labels})
	}
	return out
}

// serveSD answers Prometheus's service discovery request: GET /api/v1/sd[?port=N].
func serveSD(src Source) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		port := DefaultExporterPort
		if p := r.URL.Query().Get("port"); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				http.Error(w, "port: want a TCP port, 1 to 65535", http.StatusBadRequest)
				return
			}
			port = n
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(Targets(src.Lab(), port))
	}
}
