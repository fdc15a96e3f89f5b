// Package overlay renders the files one node receives on top of its role's
// image: hostname, hosts, network, chrony, munge, Slurm, NFS, SSH, pdsh and
// Lmod settings, from the text/template files in the repository's overlays/
// directory and the cluster as the inventory knows it.
//
// Rendering is pure: an fs.FS of templates and a Cluster in, a sorted list of
// files out, so the same inventory always gives the same bytes. Files that
// carry secrets are marked, and Public drops them for anything that may be
// shown or logged.
package overlay
