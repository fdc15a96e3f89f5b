// Package secrets keeps the cluster's secrets in bootd's state directory: the
// munge key, root's SSH key pair, every node's SSH host keys, and the passwords of the nodes'
// BMCs (given by the admin through the daemon, never made here). Each key is made
// once, on first use, and reused from then on, so a node that reboots gets the
// same keys and its peers keep trusting it. A node's host keys belong to the
// machine that holds its name: when the name moves, they are revoked (a list
// every known_hosts carries) and new ones made.
//
// Files live under <state-dir>/secrets (mode 0700), each written 0600 with a
// temporary file, fsync, rename and a directory fsync, so a crash leaves
// either no key or a whole one. Nothing here logs, and the types that carry
// private material print redacted.
package secrets
