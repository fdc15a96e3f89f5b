package overlay

import (
	"io/fs"
	"net/netip"
	"time"
)

// Hardware is what a node reports about itself at first boot: the numbers of
// its `slurmd -C` line and its GPUs (nvidia-smi).
type Hardware struct {
	CPUs           int
	Boards         int
	Sockets        int // per board, as slurmd -C's SocketsPerBoard
	CoresPerSocket int
	ThreadsPerCore int
	RealMemoryMiB  int
	GPUs           []GPU
}

// GPU is one GPU as Slurm's gres.conf names it.
type GPU struct {
	Type string // e.g. rtx3090: lower-case, no spaces or colons
	File string // e.g. /dev/nvidia0
}

// Node is one assigned node.
type Node struct {
	Name     string
	Role     string // RoleMaster or RoleCompute
	Address  netip.Addr
	MAC      string    // the boot NIC, lower-case and colon-separated
	Hardware *Hardware // nil until the node has reported
}

// The roles a node can have.
const (
	RoleMaster  = "master"
	RoleCompute = "compute"
)

// Cluster is everything a node's files depend on.
type Cluster struct {
	Name     string // Slurm's ClusterName
	Domain   string // DNS domain of the nodes; "" for short names only
	Subnet   netip.Prefix
	Gateway  netip.Addr // zero: none
	DNS      []netip.Addr
	BootdURL string // e.g. http://10.80.0.1
	Nodes    []Node // every assigned node, master included
	// Planned is every name the configuration places, assigned or not (master, c1..cN), so
	// /etc/hosts on a node booted today resolves a node assigned tomorrow. Empty: Nodes.
	Planned []Node
	// NTPServers are the master's upstream time sources, one chrony "pool" line each (host
	// names, pools or addresses; bootd's [master] ntp_servers). Empty: the master serves its own
	// clock to the lab ("local stratum 10") and reaches out to nothing.
	NTPServers []string
	Slurm      SlurmOptions
	Users      []User // lab members, made on every node
	Secrets    Secrets
}

// User is a lab member's account (bootd's [users.NAME]): bootd-node makes it on every node with
// this uid, and a group of its own with gid = uid.
type User struct {
	Name    string
	UID     int
	Comment string   // GECOS; "" for none
	Shell   string   // login shell
	SSHKeys []string // authorized_keys lines
}

// SlurmOptions are the Slurm settings a site may change. Zero fields take the
// defaults of DefaultSlurmOptions.
type SlurmOptions struct {
	ProctrackType string // default proctrack/cgroup; proctrack/linuxproc without cgroups
	TaskPlugin    string // default task/cgroup,task/affinity; task/none without cgroups
	MaxNodeCount  int    // default 99 (bootd's compute.max_nodes): how many dynamic nodes may register
	// Power saving: SuspendTime 0 leaves it off; the timeouts default to 2 and 10 minutes.
	SuspendTime, SuspendTimeout, ResumeTimeout time.Duration
}

// DefaultSlurmOptions are the reference lab's settings.
var DefaultSlurmOptions = SlurmOptions{
	ProctrackType:  "proctrack/cgroup",
	TaskPlugin:     "task/cgroup,task/affinity",
	MaxNodeCount:   99,
	SuspendTimeout: 2 * time.Minute,
	ResumeTimeout:  10 * time.Minute,
}

// Secrets are the cluster's secrets (see internal/secrets). Render reads only
// what the rendered node may hold: the munge key, the root key pair (private
// half on the master only), its own host private keys, and every node's host
// public keys for known_hosts.
type Secrets struct {
	MungeKey       []byte
	RootPublicKey  string // one authorized_keys line
	RootPrivateKey string // OpenSSH format
	HostKeys       map[string]HostKeys
	// HostCAPublic is the host CA's public key: known_hosts trusts every certificate it signed,
	// so a node knows the host keys of nodes assigned after it booted.
	HostCAPublic string
	// RevokedHostKeys are public host keys ("type base64") that no node holds any more (the name
	// moved to other hardware, or was unassigned): known_hosts refuses them, with or without a
	// certificate.
	RevokedHostKeys []string
}

// HostKeys are one node's SSH host keys.
type HostKeys []HostKey

// HostKey is one SSH host key pair, as internal/secrets keeps it (the wiring
// copies secrets.KeyPair field by field: this package reads no files).
type HostKey struct {
	Type    string // ed25519, ecdsa, rsa: as in ssh_host_<type>_key
	Private string
	Public  string
	Cert    string // Public signed by the host CA (ssh_host_<type>_key-cert.pub)
}

// File is one rendered file.
type File struct {
	Path     string
	Mode     fs.FileMode // permission bits only
	UID, GID int
	Data     []byte
	Secret   bool // holds key material: only for its node, never logged
}

// Public returns files without the secret ones, for listings and logs.
func Public(files []File) []File {
	out := make([]File, 0, len(files))
	for _, f := range files {
		if !f.Secret {
			out = append(out, f)
		}
	}
	return out
}
