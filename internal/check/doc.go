// Package check proves that a lab's nodes work for their users (`bootd check`), through the
// nodes' own tools run as root over SSH from the master: munge credentials decode on the master,
// slurmd registered with the hardware the node reported, srun runs across the nodes, the NFS
// shares are mounted, chronyd follows the master, Lmod finds the shared modules and the GPUs
// that gres lists are visible. Each failure names the node, the check and the fix.
package check
