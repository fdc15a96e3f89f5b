package inventory

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// AssignRequest binds a machine to a name. Role and Address follow from the name (the caller
// computes them from the configuration); MAC may be empty when exactly one machine waits.
type AssignRequest struct {
	Name    string
	Role    string
	Address netip.Addr
	MAC     string
	// Replace moves an existing name to new hardware (e.g. a replaced motherboard).
	Replace bool
	// TPM pins the machine's TPM endorsement key (bootd assign --ek): set on the new binding, or
	// on the node when the name is bound to that machine already. nil: the node's first overlay
	// request that carries a key records it.
	TPM *TPM
}

// NodeByMAC returns the node bound to mac.
func (s *Store) NodeByMAC(mac string) (Node, error) {
	return s.find(func(n Node) bool { return n.MAC == mac }, "MAC "+mac)
}

// NodeByName returns the node called name.
func (s *Store) NodeByName(name string) (Node, error) {
	return s.find(func(n Node) bool { return n.Name == name }, "node "+name)
}

// NodeByAddress returns the node whose static address is a.
func (s *Store) NodeByAddress(a netip.Addr) (Node, error) {
	return s.find(func(n Node) bool { return n.Address == a }, "address "+a.String())
}

func (s *Store) find(match func(Node) bool, what string) (Node, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.IndexFunc(s.data.Nodes, match); i >= 0 {
		return s.data.Nodes[i], nil
	}
	return Node{}, fmt.Errorf("%s: %w", what, ErrNotFound)
}

// See records that the machine with mac asked to boot, with the facts it reported. It returns
// the node when the machine is assigned; otherwise the machine is (or stays) waiting and ok is false.
func (s *Store) See(mac string, facts Facts) (node Node, ok bool, err error) {
	s.mu.Lock()
	now := s.now()
	s.pruneWaiting(now)
	var g uint64
	if i := slices.IndexFunc(s.data.Nodes, func(n Node) bool { return n.MAC == mac }); i >= 0 {
		n := &s.data.Nodes[i]
		changed := mergeFacts(&n.Facts, facts)
		n.LastSeen = now
		node, ok, g = *n, true, s.bumpIf(changed)
	} else if i := slices.IndexFunc(s.data.Waiting, func(m Machine) bool { return m.MAC == mac }); i < 0 {
		s.data.Waiting = append(s.data.Waiting, Machine{MAC: mac, Facts: facts, FirstSeen: now, LastSeen: now})
		g = s.bump()
	} else {
		m := &s.data.Waiting[i]
		changed := mergeFacts(&m.Facts, facts)
		m.LastSeen = now
		g = s.bumpIf(changed)
	}
	s.mu.Unlock()
	// Group-committed: on a failed write the change stays in memory (see Store).
	return node, ok, s.commit(g)
}

// bumpIf gives a change a generation (to be written) when something that matters changed, or
// when last-seen times are getting stale on disk; 0 otherwise. Callers hold s.mu.
func (s *Store) bumpIf(changed bool) uint64 {
	if changed || s.now().Sub(s.persisted) >= seenPersistInterval {
		return s.bump()
	}
	return 0
}

// WaitingTTL is how long a machine counts as waiting after its last poll: a waiting machine
// polls every few seconds, so one silent this long was switched off or booted elsewhere.
const WaitingTTL = 10 * time.Minute

// pruneWaiting forgets machines that stopped polling; the next save writes it down.
func (s *Store) pruneWaiting(now time.Time) {
	s.data.Waiting = slices.DeleteFunc(s.data.Waiting, func(m Machine) bool { return now.Sub(m.LastSeen) > WaitingTTL })
}

// mergeFacts fills dst with the non-empty facts of src and reports whether anything changed.
func mergeFacts(dst *Facts, src Facts) bool {
	changed := false
	set := func(d *string, v string) {
		if v != "" && *d != v {
			*d, changed = v, true
		}
	}
	set(&dst.UUID, src.UUID)
	set(&dst.Manufacturer, src.Manufacturer)
	set(&dst.Product, src.Product)
	set(&dst.Serial, src.Serial)
	set(&dst.Arch, src.Arch)
	set(&dst.Platform, src.Platform)
	return changed
}

// Assignment is what Assign did: the node, and the binding of its name to other hardware that it
// replaced (--replace), if any.
type Assignment struct {
	Node
	Replaced *Node
}

// Assign binds a waiting machine to req.Name.
func (s *Store) Assign(req AssignRequest) (Assignment, error) {
	s.lockIdle()
	defer s.mu.Unlock()
	s.pruneWaiting(s.now())
	mac, err := s.pickMAC(req.MAC)
	if req.MAC == "" && req.TPM != nil && !req.Replace {
		// `bootd assign c4 --ek FILE` for a c4 already bound pins its key: that machine is meant.
		if i, ierr := s.nodeIndex(req.Name); ierr == nil {
			mac, err = s.data.Nodes[i].MAC, nil
		}
	}
	if err != nil {
		return Assignment{}, err
	}
	if i := slices.IndexFunc(s.data.Nodes, func(n Node) bool { return n.MAC == mac }); i >= 0 {
		n := s.data.Nodes[i]
		if n.Name == req.Name {
			if req.TPM != nil {
				return s.pinTPM(i, *req.TPM)
			}
			return Assignment{Node: n}, nil // already so: assigning twice is harmless
		}
		return Assignment{}, &Conflict{fmt.Sprintf("machine %s is already %s (%s, %s); run `bootd unassign %s` first", mac, n.Name, n.Role, n.Address, n.Name)}
	}
	w := slices.IndexFunc(s.data.Waiting, func(m Machine) bool { return m.MAC == mac })
	if w < 0 {
		return Assignment{}, &Conflict{fmt.Sprintf("no machine with MAC %s has netbooted here: power it on with network boot first and look for it in `bootd nodes`", mac)}
	}
	if err := s.checkFree(req); err != nil {
		return Assignment{}, err
	}
	return s.bind(req, s.data.Waiting[w])
}

// pickMAC returns the normalized MAC to assign, or the one machine waiting when none is given.
func (s *Store) pickMAC(mac string) (string, error) {
	if mac != "" {
		return NormalizeMAC(mac)
	}
	switch len(s.data.Waiting) {
	case 0:
		return "", &Conflict{"no machine is waiting to be named: power one on with network boot, or give --mac"}
	case 1:
		return s.data.Waiting[0].MAC, nil
	default:
		return "", &Ambiguous{Waiting: append([]Machine(nil), s.data.Waiting...)}
	}
}

// checkFree refuses a name or address that another machine holds, unless the name is being moved.
func (s *Store) checkFree(req AssignRequest) error {
	for _, n := range s.data.Nodes {
		if n.Name == req.Name && !req.Replace {
			return &Conflict{fmt.Sprintf("name %s is already bound to machine %s (%s, %s); to move %s to new hardware (e.g. a replaced motherboard) add --replace, or run `bootd unassign %s` first", n.Name, n.MAC, n.Role, n.Address, n.Name, n.Name)}
		}
		if n.Name != req.Name && n.Address == req.Address {
			return &Conflict{fmt.Sprintf("address %s is already used by node %s (%s)", n.Address, n.Name, n.MAC)}
		}
	}
	return nil
}

// bind turns waiting machine m into node req.Name, replacing an older binding of the name.
func (s *Store) bind(req AssignRequest, m Machine) (Assignment, error) {
	old := s.data
	var replaced *Node
	if i := slices.IndexFunc(s.data.Nodes, func(n Node) bool { return n.Name == req.Name }); i >= 0 {
		prev := s.data.Nodes[i]
		replaced = &prev
	}
	node := Node{
		Name: req.Name, Role: req.Role, MAC: m.MAC, Address: req.Address, State: StateAssigned,
		Facts: m.Facts, FirstSeen: m.FirstSeen, LastSeen: m.LastSeen, AssignedAt: s.now(), TPM: req.TPM,
	}
	s.data.Nodes = slices.DeleteFunc(slices.Clone(s.data.Nodes), func(n Node) bool { return n.Name == req.Name })
	s.data.Nodes = append(s.data.Nodes, node)
	slices.SortFunc(s.data.Nodes, func(a, b Node) int { return compareNames(a.Name, b.Name) })
	s.data.Waiting = slices.DeleteFunc(slices.Clone(s.data.Waiting), func(w Machine) bool { return w.MAC == m.MAC })
	if err := s.saveOr(old); err != nil {
		return Assignment{}, err
	}
	return Assignment{Node: node, Replaced: replaced}, nil
}

// Unassign forgets the node called name; its machine will wait to be named again at its next boot.
func (s *Store) Unassign(name string) (Node, error) {
	s.lockIdle()
	defer s.mu.Unlock()
	i, err := s.nodeIndex(name)
	if err != nil {
		return Node{}, err
	}
	old, n := s.data, s.data.Nodes[i]
	s.data.Nodes = slices.Delete(slices.Clone(s.data.Nodes), i, i+1)
	if !slices.Contains(s.data.Released, name) {
		s.data.Released = append(slices.Clone(s.data.Released), name)
	}
	if err := s.saveOr(old); err != nil {
		return Node{}, err
	}
	return n, nil
}

// Released lists the names unassigned whose host keys are not forgotten yet (Forgotten).
func (s *Store) Released() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.data.Released)
}

// Forgotten records that the host keys of name, released by Unassign, are forgotten.
func (s *Store) Forgotten(name string) error {
	s.lockIdle()
	defer s.mu.Unlock()
	i := slices.Index(s.data.Released, name)
	if i < 0 {
		return nil
	}
	old := s.data
	s.data.Released = slices.Delete(slices.Clone(s.data.Released), i, i+1)
	return s.saveOr(old)
}

// nodeIndex returns the index of node name, or ErrNotFound. Callers hold s.mu.
func (s *Store) nodeIndex(name string) (int, error) {
	if i := slices.IndexFunc(s.data.Nodes, func(n Node) bool { return n.Name == name }); i >= 0 {
		return i, nil
	}
	return -1, fmt.Errorf("node %s: %w", name, ErrNotFound)
}

// SetState records that node name reached state st.
//
// Its usual case, asked by every boot script and hello, is the state the node has already: then
// only last-seen moves, as See moves it (in place, group-committed when the time on disk is
// stale), without taking the writer's turn (lockIdle).
func (s *Store) SetState(name string, st State) (Node, error) {
	s.mu.Lock()
	i, err := s.nodeIndex(name)
	if err != nil {
		s.mu.Unlock()
		return Node{}, err
	}
	if n := &s.data.Nodes[i]; n.State == st {
		n.LastSeen = s.now()
		node, g := *n, s.bumpIf(false)
		s.mu.Unlock()
		return node, s.commit(g)
	}
	s.mu.Unlock()
	s.lockIdle() // the node may have changed or gone meanwhile: look again
	defer s.mu.Unlock()
	if i, err = s.nodeIndex(name); err != nil {
		return Node{}, err
	}
	old := s.data
	s.data.Nodes = slices.Clone(s.data.Nodes)
	n := &s.data.Nodes[i]
	n.LastSeen, n.State = s.now(), st
	if err := s.saveOr(old); err != nil {
		return Node{}, err
	}
	return *n, nil
}

// saveOr writes the state and, when that fails, puts old back: the state before the caller's
// change, which it made to copies (slices.Clone), so old is intact. Callers hold s.mu, taken
// with lockIdle.
func (s *Store) saveOr(old snapshot) error {
	if err := s.save(); err != nil {
		s.data = old
		return err
	}
	return nil
}

// compareNames orders node names the way people count: master, c1, c2, ..., c10.
func compareNames(a, b string) int {
	pa, na := splitNumber(a)
	pb, nb := splitNumber(b)
	if c := strings.Compare(pa, pb); c != 0 {
		return c
	}
	return na - nb
}

func splitNumber(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, _ := strconv.Atoi(s[i:])
	return s[:i], n
}

// SetHardware records what node name reported about its hardware and marks it ready.
func (s *Store) SetHardware(name string, hw Hardware) (Node, error) {
	s.lockIdle()
	defer s.mu.Unlock()
	i, err := s.nodeIndex(name)
	if err != nil {
		return Node{}, err
	}
	old := s.data
	s.data.Nodes = slices.Clone(s.data.Nodes)
	n := &s.data.Nodes[i]
	n.Hardware, n.State, n.LastSeen = &hw, StateReady, s.now()
	if err := s.saveOr(old); err != nil {
		return Node{}, err
	}
	return *n, nil
}

// SetChecked records the outcome of a `bootd check` of node name: a ready node that passed
// becomes validated, a validated node that failed is ready again. A node in any other state
// keeps it (it has not reported its hardware since it last booted, so it cannot be validated).
// changed says whether the state moved.
func (s *Store) SetChecked(name string, passed bool) (node Node, changed bool, err error) {
	s.lockIdle()
	defer s.mu.Unlock()
	i, err := s.nodeIndex(name)
	if err != nil {
		return Node{}, false, err
	}
	n := s.data.Nodes[i]
	next := n.State
	switch {
	case passed && n.State == StateReady:
		next = StateValidated
	case !passed && n.State == StateValidated:
		next = StateReady
	}
	if next == n.State {
		return n, false, nil
	}
	old := s.data
	s.data.Nodes = slices.Clone(s.data.Nodes)
	s.data.Nodes[i].State = next
	if err := s.saveOr(old); err != nil {
		return Node{}, false, err
	}
	return s.data.Nodes[i], true, nil
}

// pinTPM sets the endorsement key of node i, which the admin named (assign --ek for a node
// already bound): it replaces any key recorded before. Callers hold s.mu, taken with lockIdle.
func (s *Store) pinTPM(i int, t TPM) (Assignment, error) {
	old := s.data
	s.data.Nodes = slices.Clone(s.data.Nodes)
	n := &s.data.Nodes[i]
	n.TPM = &t
	if err := s.saveOr(old); err != nil {
		return Assignment{}, err
	}
	return Assignment{Node: *n}, nil
}

// TPMMismatch is RecordTPM's refusal: the node has another endorsement key on record.
type TPMMismatch struct {
	Node     string
	Recorded TPM
}

func (e *TPMMismatch) Error() string {
	how := "recorded at its first boot"
	if e.Recorded.Pinned {
		how = "pinned by bootd assign --ek"
	}
	return fmt.Sprintf("%s's TPM endorsement key is %s (%s), not this one", e.Node, e.Recorded.EKSHA256, how)
}

// RecordTPM checks the endorsement key a request from node name (assigned at assignedAt)
// presents: the node's key when one is on record, else t becomes it (trust on first use). It
// returns the node as recorded; a different key is a *TPMMismatch, and a node assigned anew
// since the caller identified it is ErrNotFound.
func (s *Store) RecordTPM(name string, assignedAt time.Time, t TPM) (Node, error) {
	s.lockIdle()
	defer s.mu.Unlock()
	i, err := s.nodeIndex(name)
	if err != nil {
		return Node{}, err
	}
	n := s.data.Nodes[i]
	if !n.AssignedAt.Equal(assignedAt) {
		return Node{}, fmt.Errorf("node %s was assigned again meanwhile: %w", name, ErrNotFound)
	}
	if n.TPM != nil {
		if !n.TPM.SameKey(&t) {
			return n, &TPMMismatch{Node: name, Recorded: *n.TPM}
		}
		return n, nil
	}
	old := s.data
	s.data.Nodes = slices.Clone(s.data.Nodes)
	s.data.Nodes[i].TPM = &t
	if err := s.saveOr(old); err != nil {
		return Node{}, err
	}
	return s.data.Nodes[i], nil
}
