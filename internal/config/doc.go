// Package config holds bootd's configuration: the reference-lab defaults,
// strict loading of a TOML file over them, validation, and node placement
// (a node's name decides its role, address and image).
//
// With no file, [Default] reproduces the reference lab: subnet 10.80.0.0/24,
// "master" at 10.80.0.100, compute nodes c1, c2, ... at 10.80.0.101, ...,
// and a discovery pool 10.80.0.200-10.80.0.249 for machines not yet assigned.
//
// A file overrides only the keys it names. Every key, with its default and
// meaning, is listed in dist/bootd.example.toml; a typical lab needs only a few:
//
//	interface = "eth1"
//
//	[network]
//	gateway = "10.80.0.1"
//	dns = ["10.80.0.1"]
//	domain = "lab.example"
//
//	[compute]
//	max_nodes = 24
//
// Loading is strict so that a typo never silently falls back to a default:
// unknown keys, wrong types and values that do not fit together are errors,
// and each error names the file, the line and the key, as in
//
//	bootd.toml:12: network.subnet: "10.80.0/24" is not a CIDR (want e.g. 10.80.0.0/24)
package config
