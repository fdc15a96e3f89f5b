// Package inventory keeps bootd's record of the lab: assigned nodes, machines waiting to be named,
// and discovery leases, in one JSON file under the state directory that is replaced atomically on
// every change, so a crash at any moment leaves the previous or the new state, never a mix.
package inventory
