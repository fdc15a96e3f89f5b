// Package bootd wires the appliance: it reads the configuration, opens the inventory and the
// image catalog, adapts them to the interfaces the listeners declare, and runs DHCP, TFTP, HTTP
// and the control socket under one errgroup, bound to the one configured interface.
package bootd
