package check

import (
	"time"

	"github.com/labcluster/gpucluster/internal/inventory"
)

// The checks, by the names reports give them.
const (
	SSH       = "ssh"          // the master reaches the node as root over SSH (bootd reaches the master)
	Slurmctld = "slurmctld"    // master: slurmctld answers
	Munge     = "munge"        // a credential made on the node decodes on the master
	Slurmd    = "slurmd"       // slurmd answers, and registered with the node's reported CPUs, memory and GPUs
	Srun      = "srun"         // srun runs a task on the node, in one step across every checked node
	Home      = "nfs-home"     // the node sees the master's /home
	Software  = "nfs-software" // the node sees the master's /opt/software
	Chrony    = "chrony"       // chronyd follows the master and is synchronised
	Lmod      = "lmod"         // a login shell's Lmod lists every module of the shared tree
	GPUs      = "gpus"         // nvidia-smi lists the GPUs gres says the node has
)

// Status is the outcome of one check.
type Status string

// The outcomes.
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip" // does not apply to the node (GPUs on a node without any)
)

// Result is one check of one node.
type Result struct {
	Check  string `json:"check"`
	Status Status `json:"status"`
	Detail string `json:"detail,omitempty"` // what was seen
	Fix    string `json:"fix,omitempty"`    // a failure: what to do about it
}

// NodeReport is every check of one node.
type NodeReport struct {
	Name   string `json:"name"`
	Role   string `json:"role"`
	Passed bool   `json:"passed"` // checked, and no check failed
	// Skipped: not checked, for a reason that is no fault (Slurm's power saving switched it
	// off); its one result says why. Neither passed nor failed: its state stays.
	Skipped bool            `json:"skipped,omitempty"`
	State   inventory.State `json:"state"` // the node's state after the check (bootd fills it in)
	Results []Result        `json:"results"`
}

// Failed returns the node's failed checks.
func (r NodeReport) Failed() []Result {
	var out []Result
	for _, res := range r.Results {
		if res.Status == Fail {
			out = append(out, res)
		}
	}
	return out
}

// Report is a whole run.
type Report struct {
	Master  string        `json:"master"` // the master the checks ran from: name (address)
	Passed  bool          `json:"passed"` // every node passed or was skipped
	Started time.Time     `json:"started"`
	Took    time.Duration `json:"took_ns"`
	Nodes   []NodeReport  `json:"nodes"`
}
