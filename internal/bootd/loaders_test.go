package bootd

import (
	"net"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/config"
)

// The loader watch follows a UEFI PC's netboots: ipxe.efi first; after it fetched ipxe.efi and
// its firmware netbooted again without iPXE ever asking, snponly.efi; once iPXE runs, the PC
// leaves `bootd nodes`' list. A PC that refuses both (Secure Boot) stays listed with that advice,
// and one that fetched and went quiet is listed after a minute.
func TestLoaderWatch(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	noName := func(string) string { return "" }

	t.Run("hangs in ipxe.efi, then snponly.efi starts", func(t *testing.T) {
		w := newLoaderWatch(config.UEFI{Loader: config.LoaderIPXE, Fallback: true})
		w.now = clock
		pc := mac("52:54:00:00:00:01")
		if got := w.UEFILoader(pc); got != config.LoaderIPXE {
			t.Fatalf("first loader %s", got)
		}
		w.Firmware(pc, "ipxe.efi") // ACK
		w.Sent(pc, "ipxe.efi")
		w.Firmware(pc, "") // power-cycled: its firmware asks again
		if got := w.UEFILoader(pc); got != config.LoaderSNPOnly {
			t.Fatalf("after ipxe.efi never started: %s, want snponly.efi", got)
		}
		ns := w.NotStarted(noName)
		if len(ns) != 1 || ns[0].Fetched["ipxe.efi"] != 1 || ns[0].Next != config.LoaderSNPOnly || ns[0].Advice != adviceFallback {
			t.Fatalf("not started: %+v", ns)
		}
		w.Sent(pc, "snponly.efi")
		w.IPXE(pc)
		if ns := w.NotStarted(noName); len(ns) != 0 {
			t.Errorf("listed after iPXE ran: %+v", ns)
		}
		if got := w.UEFILoader(pc); got != config.LoaderSNPOnly {
			t.Errorf("after snponly.efi worked: %s, want snponly.efi again", got)
		}
	})
	t.Run("secure boot refuses both", func(t *testing.T) {
		w := newLoaderWatch(config.UEFI{Loader: config.LoaderIPXE, Fallback: true})
		w.now = clock
		pc := mac("52:54:00:00:00:02")
		for _, f := range []string{"ipxe.efi", "snponly.efi"} {
			if got := w.UEFILoader(pc); got != f {
				t.Fatalf("loader %s, want %s", got, f)
			}
			w.Sent(pc, f)
			w.Firmware(pc, "")
		}
		ns := w.NotStarted(func(string) string { return "c4" })
		if len(ns) != 1 || ns[0].Node != "c4" || ns[0].Fetched["snponly.efi"] != 1 || ns[0].Advice != adviceSecureBoot {
			t.Fatalf("not started: %+v", ns)
		}
	})
	t.Run("uefi http boot after a refused ipxe.efi", func(t *testing.T) {
		w := newLoaderWatch(config.UEFI{Loader: config.LoaderIPXE, Fallback: true})
		w.now = clock
		pc := mac("52:54:00:00:00:04")
		w.Sent(pc, "ipxe.efi")
		w.Firmware(pc, "") // its HTTP boot option's DISCOVER
		w.Firmware(pc, "http://10.80.0.1/ipxe/"+w.UEFILoader(pc))
		w.now = func() time.Time { return now.Add(notStartedAfter) }
		ns := w.NotStarted(noName)
		if len(ns) != 1 || ns[0].Fetched["ipxe.efi"] != 1 || ns[0].Fetched["snponly.efi"] != 1 || ns[0].Advice != adviceSecureBoot {
			t.Fatalf("not started: %+v", ns)
		}
	})
	t.Run("fetched, then quiet", func(t *testing.T) {
		w := newLoaderWatch(config.UEFI{Loader: config.LoaderIPXE, Fallback: false})
		w.now = clock
		pc := mac("52:54:00:00:00:03")
		w.Sent(pc, "ipxe.efi")
		if ns := w.NotStarted(noName); len(ns) != 0 {
			t.Fatalf("listed at once: %+v", ns)
		}
		w.now = func() time.Time { return now.Add(notStartedAfter) }
		ns := w.NotStarted(noName)
		if len(ns) != 1 || ns[0].Next != config.LoaderIPXE || ns[0].Advice != adviceSecureBoot {
			t.Fatalf("not started (fallback off): %+v", ns)
		}
	})
	t.Run("configured by maker", func(t *testing.T) {
		w := newLoaderWatch(config.UEFI{Loader: config.LoaderIPXE, SNPOnly: []string{"00:1b:21"}})
		if got := w.UEFILoader(mac("00:1b:21:01:02:03")); got != config.LoaderSNPOnly {
			t.Errorf("maker's PC gets %s", got)
		}
		if got := w.UEFILoader(mac("00:1b:22:01:02:03")); got != config.LoaderIPXE {
			t.Errorf("another PC gets %s", got)
		}
	})
}
