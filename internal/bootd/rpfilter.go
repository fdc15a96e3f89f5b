package bootd

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"
)

// rpFilterStrict is rp_filter's strict mode: a packet is dropped unless the route back to its
// source leaves by the interface it came in on (Documentation/networking/ip-sysctl.rst).
const rpFilterStrict = 1

// reversePathFilter reads conf/all's and conf/IFNAME's rp_filter under procSys (/proc/sys): 0 is
// off, 1 strict, 2 loose, and the kernel applies the higher of the two on ifname.
func reversePathFilter(procSys, ifname string) (all, iface int, err error) {
	read := func(name string) (int, error) {
		path := filepath.Join(procSys, "net/ipv4/conf", name, "rp_filter")
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		return v, nil
	}
	if all, err = read("all"); err != nil {
		return 0, 0, err
	}
	iface, err = read(ifname)
	return all, iface, err
}

// rpFilterAdvice says what to set so that filtering on ifname is strict, or "" when it is.
func rpFilterAdvice(ifname string, all, iface int) string {
	if max(all, iface) == rpFilterStrict {
		return ""
	}
	var set []string
	if iface != rpFilterStrict {
		set = append(set, sysctlKey(ifname)+"=1")
	}
	if all > rpFilterStrict {
		// The kernel takes the higher of the two, so a loose "all" overrides a strict interface.
		// 0, not 1: the other interfaces keep their own values rather than all turning strict,
		// which could break asymmetric routes on the uplink.
		set = append(set, "net.ipv4.conf.all.rp_filter=0")
	}
	return "sysctl -w " + strings.Join(set, " ") + " (and the same in /etc/sysctl.d/ to keep it)"
}

// sysctlKey names ifname's rp_filter for sysctl: with slashes when the name has a dot (a VLAN,
// eth1.100), which sysctl would take for a separator (sysctl.d(5)).
func sysctlKey(ifname string) string {
	if strings.Contains(ifname, ".") {
		return "net/ipv4/conf/" + ifname + "/rp_filter"
	}
	return "net.ipv4.conf." + ifname + ".rp_filter"
}

// checkReversePathFilter warns when the lab interface's reverse-path filtering is not strict.
// A TFTP transfer answers from a socket of its own that pin/tftp does not bind to the interface
// (SECURITY.md), so a read request with a forged source address on another network the appliance
// routes to would have its data sent there; strict filtering drops such a request as it arrives.
func (d *daemon) checkReversePathFilter(procSys string) {
	all, iface, err := reversePathFilter(procSys, d.cfg.Interface)
	if err != nil {
		d.log.WithError(err).Warn("cannot read the lab interface's reverse-path filter (rp_filter)")
		return
	}
	log := d.log.WithFields(logrus.Fields{"interface": d.cfg.Interface, "rp_filter": max(all, iface)})
	if advice := rpFilterAdvice(d.cfg.Interface, all, iface); advice != "" {
		log.WithField("fix", advice).
			Warn("reverse-path filtering on the lab interface is not strict: a TFTP request with a forged source address gets its data sent to that address on another network; set it strict")
		return
	}
	log.Info("reverse-path filtering on the lab interface is strict")
}
