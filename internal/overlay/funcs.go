package overlay

import (
	"crypto/sha1"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"text/template"
	"time"
)

// funcs are the helpers templates call. The secret ones read only what v's
// node may hold, and fail rather than render an empty key.
func funcs(v view) template.FuncMap {
	return template.FuncMap{
		"names":       func(n Node) string { return names(v.Cluster.Domain, n) },
		"hostList":    func(n Node) string { return hostList(v.Cluster.Domain, n) },
		"keyOnly":     keyOnly,
		"hostPrivate": func(typ string) (string, error) { return hostKey(v, v.Node.Name, typ, true) },
		"hostPublic":  func(typ string) (string, error) { return hostKey(v, v.Node.Name, typ, false) },
		"hostKeys":    func(n Node) (HostKeys, error) { return publicOnly(v.Cluster.Secrets.HostKeys, n.Name) },
		"hostCert":    func(typ string) (string, error) { return hostCert(v, typ) },
		"hostCA":      func() (string, error) { return nonEmpty("host CA public key", v.Cluster.Secrets.HostCAPublic) },
		"caPatterns":  func() string { return caPatterns(v) },
		"revokedKeys": func() []string { return v.Cluster.Secrets.RevokedHostKeys },
		"mungeKey":    func() (string, error) { return mungeKey(v) },
		"rootPrivate": func() (string, error) { return rootPrivate(v) },
		"rootPublic":  func() (string, error) { return nonEmpty("root public key", v.Cluster.Secrets.RootPublicKey) },
		"gres":        gres,
		"uuid":        func(parts ...string) string { return uuid(parts) },
		"join":        join,
		"seconds":     func(d time.Duration) int64 { return int64(d / time.Second) },
		"hostPort":    hostPort,
	}
}

// hostPort is a URL's host and port, the scheme's default port when it names none:
// "http://10.80.0.1" -> "10.80.0.1:80", as a Prometheus target wants it.
func hostPort(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("bootd URL %q: no host", rawURL)
	}
	if u.Port() != "" {
		return u.Host, nil
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// names is a node's names for hosts and known_hosts: the full name first
// (hosts(5) treats the first as canonical), then the short one.
func names(domain string, n Node) string {
	if domain == "" {
		return n.Name
	}
	return n.Name + "." + domain + " " + n.Name
}

// hostList is a node's known_hosts patterns: every name and its address.
func hostList(domain string, n Node) string {
	return strings.ReplaceAll(names(domain, n), " ", ",") + "," + n.Address.String()
}

// keyOnly drops a public key line's comment: "ssh-ed25519 AAAA... root@c1"
// -> "ssh-ed25519 AAAA...".
func keyOnly(line string) string {
	f := strings.Fields(line)
	if len(f) < 2 {
		return line
	}
	return f[0] + " " + f[1]
}

func hostKey(v view, node, typ string, private bool) (string, error) {
	for _, k := range v.Cluster.Secrets.HostKeys[node] {
		if k.Type != typ {
			continue
		}
		if private {
			return nonEmpty(typ+" host private key of "+node, k.Private)
		}
		return nonEmpty(typ+" host public key of "+node, k.Public)
	}
	return "", fmt.Errorf("no %s host key for %s", typ, node)
}

// publicOnly strips private halves, so a template listing other nodes' keys
// cannot print one by mistake.
func publicOnly(all map[string]HostKeys, node string) (HostKeys, error) {
	keys := all[node]
	if len(keys) == 0 {
		return nil, fmt.Errorf("no host keys for %s (known_hosts needs every node's)", node)
	}
	out := make(HostKeys, len(keys))
	for i, k := range keys {
		out[i] = HostKey{Type: k.Type, Public: k.Public}
	}
	return out, nil
}

func mungeKey(v view) (string, error) {
	if len(v.Cluster.Secrets.MungeKey) < 32 {
		return "", fmt.Errorf("munge key has %d bytes, munged needs at least 32", len(v.Cluster.Secrets.MungeKey))
	}
	return string(v.Cluster.Secrets.MungeKey), nil
}

// rootPrivate refuses every node but the master: computes never hold a key
// that opens every other node.
func rootPrivate(v view) (string, error) {
	if v.Node.Role != RoleMaster {
		return "", fmt.Errorf("root private key requested for %s %s", v.Node.Role, v.Node.Name)
	}
	return nonEmpty("root private key", v.Cluster.Secrets.RootPrivateKey)
}

func nonEmpty(what, s string) (string, error) {
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("%s is missing", what)
	}
	return s, nil
}

// gres is the node's GPUs as a Gres= value: gpu:<type>:<count> per type, in
// the order the types first appear.
func gres(h *Hardware) string {
	if h == nil {
		return ""
	}
	var types []string
	count := map[string]int{}
	for _, g := range h.GPUs {
		if count[g.Type] == 0 {
			types = append(types, g.Type)
		}
		count[g.Type]++
	}
	parts := make([]string, len(types))
	for i, t := range types {
		parts[i] = fmt.Sprintf("gpu:%s:%d", t, count[t])
	}
	return strings.Join(parts, ",")
}

// uuid is a name-based (version 5 layout) UUID, so a node's NetworkManager
// profile keeps one id across renders.
func uuid(parts []string) string {
	sum := sha1.Sum([]byte(strings.Join(parts, "\x00")))
	sum[6] = sum[6]&0x0f | 0x50
	sum[8] = sum[8]&0x3f | 0x80
	b := sum[:16]
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// join joins addresses (or anything printable) with sep.
func join(sep string, addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, sep)
}

// hostCert is the rendered node's certificate for its typ host key.
func hostCert(v view, typ string) (string, error) {
	for _, k := range v.Cluster.Secrets.HostKeys[v.Node.Name] {
		if k.Type == typ {
			return nonEmpty(typ+" host certificate of "+v.Node.Name, k.Cert)
		}
	}
	return "", fmt.Errorf("no %s host key for %s", typ, v.Node.Name)
}

// caPatterns are the hosts the host CA vouches for in known_hosts: every name and address of
// the address plan (or of the assigned nodes), not "*": the CA speaks for the cluster only.
func caPatterns(v view) string {
	nodes := v.Cluster.Planned
	if len(nodes) == 0 {
		nodes = v.Nodes
	}
	var pats []string
	for _, n := range nodes {
		pats = append(pats, hostList(v.Cluster.Domain, n))
	}
	return strings.Join(pats, ",")
}
