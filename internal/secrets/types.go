package secrets

import "fmt"

// KeyType is an SSH key algorithm, named as ssh-keygen -t and sshd's host key
// file names (ssh_host_<type>_key) name it.
type KeyType string

// The key types this package makes.
const (
	KeyEd25519 KeyType = "ed25519"
	KeyECDSA   KeyType = "ecdsa"
	KeyRSA     KeyType = "rsa"
)

// HostKeyTypes are the host keys every node gets: the three that Rocky 9's
// sshd-keygen@.service would otherwise create at each boot. With all three
// given, sshd-keygen finds nothing to do, every key sshd offers is one the
// cluster's known_hosts pins (a fresh random RSA key per boot would not be),
// and a node in FIPS mode, where ed25519 is refused, still has pinned keys.
var HostKeyTypes = []KeyType{KeyEd25519, KeyECDSA, KeyRSA}

// KeyPair is an OpenSSH key pair: Private in OpenSSH's PEM format, Public as
// one authorized_keys line ("ssh-ed25519 AAAA... comment") without newline.
type KeyPair struct {
	Type    KeyType
	Private string
	Public  string
	// Cert is the public key signed by the cluster's host CA (host keys only): clients that
	// trust the CA trust every node, including nodes assigned after they booted.
	Cert string
}

// String prints the public half only, so a stray log line leaks nothing.
func (k KeyPair) String() string { return fmt.Sprintf("%s key %s", k.Type, k.Public) }

// GoString is String, for %#v.
func (k KeyPair) GoString() string { return k.String() }

// HostKeys are one node's host keys, in HostKeyTypes order.
type HostKeys []KeyPair

// ClusterSecrets are shared by the whole cluster.
type ClusterSecrets struct {
	// MungeKey is the key every munged shares (/etc/munge/munge.key).
	MungeKey []byte
	// Root is root's key pair: its private half stays on the master, its
	// public half is authorized on every node.
	Root KeyPair
	// HostCA signs every node's host keys; its public half is the one line of known_hosts
	// that vouches for all nodes. Its private half never leaves the state directory.
	HostCA KeyPair
}

// String redacts the munge key.
func (c ClusterSecrets) String() string {
	return fmt.Sprintf("munge key (%d bytes, redacted), root %v, host CA %v", len(c.MungeKey), c.Root, c.HostCA)
}

// GoString is String, for %#v.
func (c ClusterSecrets) GoString() string { return c.String() }
