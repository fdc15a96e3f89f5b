package bootd

import (
	"net"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labcluster/gpucluster/internal/config"
	"github.com/labcluster/gpucluster/internal/ctl"
)

// notStartedAfter is how long after fetching a loader a PC counts as having never started it
// when its firmware does not come back either (it went on to its disk, or sits at an error).
const notStartedAfter = time.Minute

// maxWatched bounds the PCs the watch remembers: any machine on the segment can netboot.
const maxWatched = 4096

// Advice shown with a PC that never started its loader.
const (
	adviceFallback   = "ipxe.efi never started on it: it gets snponly.efi at its next netboot (power-cycle it)"
	adviceSecureBoot = "Secure Boot is probably on, and refuses the unsigned iPXE: turn Secure Boot off in the PC's firmware setup and netboot it again (README: Secure Boot)"
)

// loaderWatch follows each UEFI PC from its firmware's netboot to iPXE (dhcpd.Loaders): it picks
// the loader (ipxe.efi, or snponly.efi by [uefi] or after ipxe.efi never started on that PC), and
// keeps which PCs fetched a loader (tftp) and never started it, for `bootd nodes`.
type loaderWatch struct {
	cfg config.UEFI
	now func() time.Time
	mu  sync.Mutex
	pcs map[string]*loaderPC
}

// loaderPC is one PC's way from firmware to iPXE.
type loaderPC struct {
	fetched   string // the loader it fetched last, and has not started yet
	fetchedAt time.Time
	failed    map[string]int // loader -> times fetched and never started, since it last started one
	fallback  bool           // ipxe.efi never started on it: snponly.efi from now on
	seen      time.Time
}

func newLoaderWatch(cfg config.UEFI) *loaderWatch {
	return &loaderWatch{cfg: cfg, now: time.Now, pcs: map[string]*loaderPC{}}
}

// pc returns mac's record, made (and the oldest forgotten when full) if it has none. Called
// with mu held.
func (w *loaderWatch) pc(mac string) *loaderPC {
	p, ok := w.pcs[mac]
	if !ok {
		if len(w.pcs) >= maxWatched {
			w.forgetOldest()
		}
		p = &loaderPC{}
		w.pcs[mac] = p
	}
	p.seen = w.now()
	return p
}

func (w *loaderWatch) forgetOldest() {
	var oldest string
	for mac, p := range w.pcs {
		if oldest == "" || p.seen.Before(w.pcs[oldest].seen) {
			oldest = mac
		}
	}
	delete(w.pcs, oldest)
}

// UEFILoader is mac's loader: snponly.efi when [uefi] names it or its maker, or when ipxe.efi
// never started on it (and fallback is on); otherwise [uefi] loader.
func (w *loaderWatch) UEFILoader(mac net.HardwareAddr) string {
	if w.cfg.SNPOnlyFor(mac) {
		return config.LoaderSNPOnly
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.pcs[mac.String()]; ok && p.fallback {
		return config.LoaderSNPOnly
	}
	return w.cfg.Loader
}

// Firmware hears mac's firmware netboot: a new attempt (a DISCOVER, file "") after a fetched
// loader means that loader never started.
func (w *loaderWatch) Firmware(mac net.HardwareAddr, file string) {
	if strings.HasPrefix(file, "http://") || strings.HasPrefix(file, "https://") {
		// UEFI HTTP boot: the firmware fetches the URL itself, at once.
		w.Sent(mac, path.Base(file))
		return
	}
	if file != "" {
		return // a PXE ACK: what counts is whether it fetches the file (Sent, from tftp)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.pcs[mac.String()]
	if !ok || p.fetched == "" {
		return
	}
	w.failed(p)
}

// failed records that p's fetched loader never started. Called with mu held.
func (w *loaderWatch) failed(p *loaderPC) {
	if p.failed == nil {
		p.failed = map[string]int{}
	}
	p.failed[p.fetched]++
	if p.fetched == config.LoaderIPXE && w.cfg.Fallback {
		p.fallback = true
	}
	p.fetched = ""
}

// IPXE hears that iPXE runs on mac: its loader started.
func (w *loaderWatch) IPXE(mac net.HardwareAddr) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.pcs[mac.String()]; ok {
		p.fetched, p.failed = "", nil
	}
}

// Sent hears that mac fetched a loader whole (tftp).
func (w *loaderWatch) Sent(mac net.HardwareAddr, file string) {
	if !strings.HasSuffix(file, ".efi") && !strings.HasSuffix(file, ".kpxe") {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pc(mac.String())
	if p.fetched != "" {
		w.failed(p) // fetched again without starting the first: that one did not start
	}
	p.fetched, p.fetchedAt = file, w.now()
}

// NotStarted lists the PCs that fetched a loader and never started it, oldest fetch first;
// name gives an assigned PC's name.
func (w *loaderWatch) NotStarted(name func(mac string) string) []ctl.LoaderTrouble {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	var out []ctl.LoaderTrouble
	for mac, p := range w.pcs {
		pending := p.fetched != "" && now.Sub(p.fetchedAt) >= notStartedAfter
		if len(p.failed) == 0 && !pending {
			continue
		}
		t := ctl.LoaderTrouble{MAC: mac, Node: name(mac), Fetched: map[string]int{}, LastFetched: p.fetchedAt}
		for f, n := range p.failed {
			t.Fetched[f] = n
		}
		if pending {
			t.Fetched[p.fetched]++
		}
		t.Next = w.cfg.Loader
		if p.fallback || w.cfg.SNPOnlyFor(mustMAC(mac)) {
			t.Next = config.LoaderSNPOnly
		}
		t.Advice = adviceSecureBoot
		if t.Next == config.LoaderSNPOnly && t.Fetched[config.LoaderSNPOnly] == 0 {
			t.Advice = adviceFallback
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b ctl.LoaderTrouble) int { return a.LastFetched.Compare(b.LastFetched) })
	return out
}

func mustMAC(s string) net.HardwareAddr {
	m, _ := net.ParseMAC(s)
	return m
}
