package vcluster

// The NFS stand-in. A test machine's kernel may have no NFS at all (nothing in
// /proc/filesystems), and a kernel NFS server serves one export table per host, not per node.
// So the harness stands in for what a node's rendered /etc/exports and /etc/bootd/fstab (the
// block bootd-node adds to /etc/fstab) describe
// with bind mounts of one host directory per exported path:
//
//   - every path a node's /etc/exports lists becomes a plain host directory,
//     <node dir>/exports/<path>, bound over that path in the node (hiding what the host has
//     there, as the master's own fresh root would);
//   - every NFS line of a node's /etc/bootd/fstab ("master:/home /home nfs ...") binds the directory
//     the named node exports for that path at the mount point.
//
// Server and clients then see one tree, with the same owners and modes, as NFS clients of one
// server do. An exported path is a directory of its own, not part of the master's overlays:
// an overlay's merged view exists in one mount namespace only, and its upper layer must not be
// written behind its back. What the stand-in does not show is NFS itself: root_squash (root on
// a compute is root on the shared files here), the mount options, attribute caching. Those
// need a real NFS server and client: e2e's TestNFSLive runs them in a VM.

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// bindMount is a host directory bound at a path of the node, by the node's init after its
// overlays and before its tmpfs mounts (the cluster's directory may lie under /tmp).
type bindMount struct {
	Source, Target string
}

// fstabEntry is one line of fstab(5), the fields the stand-in reads.
type fstabEntry struct {
	Spec, File, Type string
}

// parseExports returns the paths an exports(5) file shares, in file order.
func parseExports(data []byte) ([]string, error) {
	var paths []string
	for i, line := range contentLines(data) {
		p := strings.Fields(line)[0]
		if !path.IsAbs(p) {
			return nil, fmt.Errorf("exports line %d: %q is not an absolute path", i+1, p)
		}
		paths = append(paths, path.Clean(p))
	}
	return paths, nil
}

// parseFstab returns the entries of an fstab(5) file.
func parseFstab(data []byte) ([]fstabEntry, error) {
	var entries []fstabEntry
	for i, line := range contentLines(data) {
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("fstab line %d: want at least spec, file and type: %q", i+1, line)
		}
		entries = append(entries, fstabEntry{Spec: f[0], File: path.Clean(f[1]), Type: f[2]})
	}
	return entries, nil
}

// contentLines are a file's lines without blanks and # comments.
func contentLines(data []byte) []string {
	var lines []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && line[0] != '#' {
			lines = append(lines, line)
		}
	}
	return lines
}

// fileAt returns the node's file at path.
func fileAt(files []File, p string) (File, bool) {
	for _, f := range files {
		if path.Clean(f.Path) == p {
			return f, true
		}
	}
	return File{}, false
}

// shares returns the bind mounts standing in for node n's NFS exports and NFS mounts, and
// records n's exported directories for the nodes that mount them later.
func (c *Cluster) shares(n *Node, files []File) ([]bindMount, error) {
	exports, err := n.exportDirs(files)
	if err != nil {
		return nil, err
	}
	binds := exports
	f, ok := fileAt(files, "/etc/bootd/fstab")
	if !ok {
		return binds, nil
	}
	entries, err := parseFstab(f.Data)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.Type != "nfs" && e.Type != "nfs4" {
			return nil, fmt.Errorf("fstab: %s on %s is %s: the harness stands in for NFS mounts only", e.Spec, e.File, e.Type)
		}
		server, p, ok := strings.Cut(e.Spec, ":")
		if !ok || !path.IsAbs(p) {
			return nil, fmt.Errorf("fstab: %q is not server:/path", e.Spec)
		}
		src, err := c.exported(server, path.Clean(p))
		if err != nil {
			return nil, fmt.Errorf("fstab: %s on %s: %w", e.Spec, e.File, err)
		}
		binds = append(binds, bindMount{Source: src, Target: e.File})
	}
	return binds, nil
}

// exportDirs creates the host directory of every path n's /etc/exports lists and returns the
// binds that put them in place on n.
func (n *Node) exportDirs(files []File) ([]bindMount, error) {
	f, ok := fileAt(files, "/etc/exports")
	if !ok {
		return nil, nil
	}
	paths, err := parseExports(f.Data)
	if err != nil {
		return nil, err
	}
	exports := map[string]string{}
	var binds []bindMount
	for _, p := range paths {
		dir := filepath.Join(n.Dir, "exports", p)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		exports[p] = dir
		binds = append(binds, bindMount{Source: dir, Target: p})
	}
	n.cluster.mu.Lock()
	n.exports = exports
	n.cluster.mu.Unlock()
	return binds, nil
}

// errNotExported is returned when no node of the cluster exports what an fstab line mounts.
var errNotExported = errors.New("not exported by any node of the cluster (add the server first)")

// exported returns the host directory holding path p as node server exports it: an exported
// path or a directory below one, as an NFS client may mount either.
func (c *Cluster) exported(server, p string) (string, error) {
	s := c.Node(server)
	if s == nil {
		return "", errNotExported
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for e, dir := range s.exports {
		if p == e {
			return dir, nil
		}
		if rest, ok := strings.CutPrefix(p, e+"/"); ok {
			return filepath.Join(dir, rest), nil
		}
	}
	return "", errNotExported
}
