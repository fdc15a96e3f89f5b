package config

import (
	"encoding/binary"
	"net"
	"net/netip"
	"time"
)

// Config is bootd's whole configuration. Build one with [Default] or [Load];
// a Config from anywhere else should pass [Config.Validate] before use.
type Config struct {
	Interface string // the one interface bootd serves on; "" until set by file or flag
	StateDir  string // inventory and control socket
	ImagesDir string // versioned images, as imgbuild writes them
	IPXEDir   string // "" = search at serve time, see FindIPXEDir
	// FetchProgram is the node's fetch program (bootd-fetch) that bootd sends as an extra
	// initrd with images published by chunks; "" = search at serve time, see FindFetchProgram.
	FetchProgram string
	LogFormat    string // "text" or "json"
	Ports        Ports
	Network      Network
	Discovery    Discovery
	Master       MasterRole
	Compute      ComputeRole
	Slurm        Slurm
	Users        []User // lab members, in the file's order
	BMC          BMCs   // the nodes' BMCs; a node without one is woken with Wake-on-LAN
	UEFI         UEFI   // which loader UEFI PCs get
	Writable     Writable
	Disks        []Disk // local disks handed over to bootd, in the file's order
	// NodeImages are nodes that boot another image than their role's (node name -> image name):
	// compute-legacy for PCs whose GPUs the open kernel modules do not drive.
	NodeImages map[string]string

	// origin remembers where Load found each value, so that Validate can
	// point at the file's line. Nil for configs built in code.
	origin *origin
}

// Ports are the listening ports; only tests and unusual setups change them.
type Ports struct {
	DHCP int
	TFTP int
	HTTP int
}

// Network describes the one IPv4 subnet bootd serves.
type Network struct {
	Subnet    netip.Prefix
	Gateway   netip.Addr // zero: no router option, empty gateway in ip=
	DNS       []netip.Addr
	Domain    string
	LeaseTime time.Duration // lease for assigned nodes
}

// Discovery is the short-lease pool for machines that have no name yet.
type Discovery struct {
	PoolStart netip.Addr
	PoolEnd   netip.Addr
	LeaseTime time.Duration
}

// MasterRole places the single master node.
type MasterRole struct {
	Name    string
	Address netip.Addr
	Image   string
	Version string // "" = newest verified version
	// NTPServers are the master's upstream time sources (host names, pools or addresses), one
	// chrony "pool" line each; empty: the master serves its own clock ("local stratum 10").
	NTPServers []string
}

// ComputeRole places compute nodes: node N is Prefix+N at FirstAddress+N-1.
type ComputeRole struct {
	Prefix       string
	FirstAddress netip.Addr // address of node 1
	MaxNodes     int
	Image        string
	Version      string // "" = newest verified version
}

// Slurm are the cluster-wide Slurm settings bootd renders into every node's slurm.conf.
type Slurm struct {
	ClusterName   string
	ProctrackType string // proctrack/cgroup; proctrack/linuxproc where cgroups are not available
	TaskPlugin    string // task/cgroup,task/affinity; task/none where cgroups are not available
	// Power saving: Slurm asks bootd to switch a compute off once it has been idle SuspendTime
	// (0: never, the default), and on again when a job needs it. SuspendTimeout is how long
	// Slurm gives a node to go off, ResumeTimeout to boot and register again.
	SuspendTime, SuspendTimeout, ResumeTimeout time.Duration
}

// Default returns the reference lab's configuration.
func Default() Config {
	return Config{
		StateDir:  "/var/lib/bootd",
		ImagesDir: "/var/lib/bootd/images",
		LogFormat: "text",
		Ports:     Ports{DHCP: 67, TFTP: 69, HTTP: 80},
		Network: Network{
			Subnet:    netip.MustParsePrefix("10.80.0.0/24"),
			LeaseTime: time.Hour,
		},
		Discovery: Discovery{
			PoolStart: netip.MustParseAddr("10.80.0.200"),
			PoolEnd:   netip.MustParseAddr("10.80.0.249"),
			LeaseTime: 2 * time.Minute,
		},
		Master: MasterRole{
			Name:       "master",
			Address:    netip.MustParseAddr("10.80.0.100"),
			Image:      "master",
			NTPServers: []string{"2.rocky.pool.ntp.org"},
		},
		Compute: ComputeRole{
			Prefix:       "c",
			FirstAddress: netip.MustParseAddr("10.80.0.101"),
			MaxNodes:     99,
			Image:        "compute",
		},
		Slurm: Slurm{ClusterName: "lab", ProctrackType: "proctrack/cgroup", TaskPlugin: "task/cgroup,task/affinity",
			SuspendTimeout: 2 * time.Minute, ResumeTimeout: 10 * time.Minute},
		BMC:      BMCs{User: "ADMIN", Protocol: ProtocolIPMI},
		UEFI:     UEFI{Loader: LoaderIPXE, Fallback: true},
		Writable: Writable{RAM: "50%"},
	}
}

// Netmask is the subnet's mask, as DHCP option 1 and dracut's ip= want it.
func (c Config) Netmask() net.IPMask {
	return net.CIDRMask(c.Network.Subnet.Bits(), 32)
}

// InPool reports whether a is in the discovery pool.
func (c Config) InPool(a netip.Addr) bool {
	return inRange(a, c.Discovery.PoolStart, c.Discovery.PoolEnd)
}

// inRange reports whether lo <= a <= hi.
func inRange(a, lo, hi netip.Addr) bool {
	return a.Compare(lo) >= 0 && a.Compare(hi) <= 0
}

// addN returns the IPv4 address n after a, and false when that leaves IPv4
// space, so a huge max_nodes cannot wrap around to 0.0.0.0.
func addN(a netip.Addr, n int) (netip.Addr, bool) {
	if !a.Is4() || n < 0 {
		return netip.Addr{}, false
	}
	b := a.As4()
	v := uint64(binary.BigEndian.Uint32(b[:])) + uint64(n)
	if v > 0xffffffff {
		return netip.Addr{}, false
	}
	binary.BigEndian.PutUint32(b[:], uint32(v))
	return netip.AddrFrom4(b), true
}

// broadcast returns the last address of an IPv4 prefix.
func broadcast(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	v := binary.BigEndian.Uint32(b[:]) | (1<<(32-p.Bits()) - 1)
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}
