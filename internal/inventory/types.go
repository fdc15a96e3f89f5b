package inventory

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// ErrNotFound is returned when no node, machine or lease matches.
var ErrNotFound = errors.New("not found")

// State is where a node is in its life: the stages bootd can observe.
type State string

// The stages a node passes, in order.
const (
	StateAssigned State = "assigned" // named, not yet booted under its name
	StateBooting  State = "booting"  // fetched its boot script under its name
	StateUp       State = "up"       // reported itself from its static address
	StateReady    State = "ready"    // reported its hardware (slurmd -C, GPUs): Slurm can use it
	// StateValidated: a ready node that passed every `bootd check` since it last reported its
	// hardware: munge, Slurm, srun, the shared file systems, time and modules work on it.
	StateValidated State = "validated"
)

// Hardware is what a booted node reports about itself, as `slurmd -C` and nvidia-smi see it.
type Hardware struct {
	CPUs           int   `json:"cpus"`
	Boards         int   `json:"boards"`
	Sockets        int   `json:"sockets"`
	CoresPerSocket int   `json:"cores_per_socket"`
	ThreadsPerCore int   `json:"threads_per_core"`
	RealMemoryMiB  int   `json:"real_memory_mib"`
	GPUs           []GPU `json:"gpus,omitempty"`
}

// GPU is one GPU of a node.
type GPU struct {
	Type string `json:"type"` // e.g. rtx3090, as gres.conf names it
	File string `json:"file"` // e.g. /dev/nvidia0
}

// Facts are what a machine's firmware (through iPXE) tells about itself.
type Facts struct {
	UUID         string `json:"uuid,omitempty"`
	Manufacturer string `json:"manufacturer,omitempty"`
	Product      string `json:"product,omitempty"`
	Serial       string `json:"serial,omitempty"`
	Arch         string `json:"arch,omitempty"`     // iPXE ${buildarch}: i386, x86_64, ...
	Platform     string `json:"platform,omitempty"` // iPXE ${platform}: pcbios, efi
}

// Node is a machine bound to a name, with the role and address that follow from the name.
type Node struct {
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	MAC        string     `json:"mac"`
	Address    netip.Addr `json:"address"`
	State      State      `json:"state"`
	Facts      Facts      `json:"facts"`
	Hardware   *Hardware  `json:"hardware,omitempty"`
	FirstSeen  time.Time  `json:"first_seen"`
	LastSeen   time.Time  `json:"last_seen"`
	AssignedAt time.Time  `json:"assigned_at"`
	// TPM is the node's TPM endorsement key: its overlay is sealed to it, and a request that
	// does not present it is refused. nil: no TPM recorded (yet), so the node is known by its
	// MAC and address only (SECURITY.md).
	TPM *TPM `json:"tpm,omitempty"`
}

// TPM is a node's TPM 2.0 endorsement key as recorded: at the node's first overlay request that
// carried one after its assignment (trust on first use), or given by the admin (bootd assign
// --ek).
type TPM struct {
	// EK is the endorsement key's public key, PKIX DER (base64 in JSON).
	EK []byte `json:"ek"`
	// EKSHA256 is the hex SHA-256 of EK: the fingerprint `bootd nodes` shows.
	EKSHA256 string `json:"ek_sha256"`
	// Pinned: the admin gave the key; otherwise the node presented it first.
	Pinned   bool      `json:"pinned,omitempty"`
	Recorded time.Time `json:"recorded"`
}

// NewTPM is the record of endorsement key ekDER (PKIX DER).
func NewTPM(ekDER []byte, pinned bool, at time.Time) TPM {
	sum := sha256.Sum256(ekDER)
	return TPM{EK: ekDER, EKSHA256: hex.EncodeToString(sum[:]), Pinned: pinned, Recorded: at}
}

// SameKey reports whether t and o record the same endorsement key.
func (t *TPM) SameKey(o *TPM) bool {
	return t != nil && o != nil && bytes.Equal(t.EK, o.EK)
}

// Machine is an unknown machine that netbooted and waits to be named.
type Machine struct {
	MAC       string    `json:"mac"`
	Facts     Facts     `json:"facts"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
}

// Lease is a short discovery-pool lease held by an unknown PXE client.
type Lease struct {
	MAC     string     `json:"mac"`
	Address netip.Addr `json:"address"`
	Expires time.Time  `json:"expires"`
	// Declined marks an address held back, kept out of the pool until Expires: a client reported
	// it in use (DHCPDECLINE), or a host was found answering ARP at it. MAC is then "".
	Declined bool `json:"declined,omitempty"`
	// HeldFor is the MAC on whose account a Declined address is held (the host found at it, or
	// the client that declined it): at most MaxHoldsPerMAC at once. "" in files of older bootds.
	HeldFor string `json:"held_for,omitempty"`
}

// Pool is the discovery address range, inclusive.
type Pool struct {
	Start, End netip.Addr
	LeaseTime  time.Duration
	// OfferHold is how long an address offered but not yet requested stays taken (0 or more than
	// LeaseTime: LeaseTime); the lease is written with the full lease time all the same, so the
	// REQUEST needs no write of its own. Short, so a flood of DISCOVERs that never REQUEST (random
	// MACs) ties up the pool only that long; a real client REQUESTs within seconds of its OFFER.
	OfferHold time.Duration
}

func (p Pool) offerHold() time.Duration {
	if p.OfferHold <= 0 || p.OfferHold > p.LeaseTime {
		return p.LeaseTime
	}
	return p.OfferHold
}

// Conflict explains why an assignment was refused.
type Conflict struct{ Msg string }

func (c *Conflict) Error() string { return c.Msg }

// Ambiguous is returned by Assign without a MAC while several machines wait.
type Ambiguous struct{ Waiting []Machine }

func (a *Ambiguous) Error() string {
	macs := make([]string, len(a.Waiting))
	for i, m := range a.Waiting {
		macs[i] = m.MAC
	}
	return fmt.Sprintf("%d machines are waiting (%s): choose one with --mac", len(a.Waiting), strings.Join(macs, ", "))
}

// NormalizeMAC returns mac in the one form the inventory stores: lower-case, colon-separated.
func NormalizeMAC(s string) (string, error) {
	hw, err := net.ParseMAC(strings.ReplaceAll(strings.TrimSpace(s), "-", ":"))
	if err != nil || len(hw) != 6 {
		return "", fmt.Errorf("%q is not an Ethernet MAC address (want e.g. 52:54:00:12:34:56)", s)
	}
	return hw.String(), nil
}
