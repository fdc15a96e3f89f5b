// Package masterssh runs shell scripts as root on the lab's master over SSH, for `bootd check`.
// bootd logs in with the cluster's root key, whose public half every node authorizes, and
// accepts the master only by a host certificate from the cluster's host CA, valid for the
// master's address, whose key is not revoked: the trust every node's known_hosts gives.
package masterssh
