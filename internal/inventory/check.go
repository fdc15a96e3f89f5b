package inventory

import (
	"errors"
	"fmt"
	"time"
)

// check refuses a state bootd would misread. After a clean stop the file alone is the state, to
// back up or edit by hand (docs/ARCHITECTURE.md); an entry bootd cannot match (a MAC no DHCP
// request carries, a name or address twice) would otherwise load silently and never work.
// Nothing is rewritten: the caller refuses to open the store, naming the file, and the entry
// stays as written until someone corrects it.
func (snap snapshot) check() error {
	seen := map[string]int{} // "name c4", "mac ...", "address ..." -> the node that has it
	for i, n := range snap.Nodes {
		if err := n.check(); err != nil {
			return fmt.Errorf("nodes[%d] (%q): %w", i, n.Name, err)
		}
		for _, key := range []string{"name " + n.Name, "mac " + n.MAC, "address " + n.Address.String()} {
			if j, ok := seen[key]; ok {
				return fmt.Errorf("nodes[%d] (%q): %s: nodes[%d] has it too", i, n.Name, key, j)
			}
			seen[key] = i
		}
	}
	for i, m := range snap.Waiting {
		if err := checkMAC(m.MAC); err != nil {
			return fmt.Errorf("waiting[%d]: %w", i, err)
		}
	}
	return nil
}

// check wants what the node's lookups match on: a name, a MAC in the form DHCP requests are
// matched in, an IPv4 address. Whether the name fits a role is the configuration's rule, which
// bootd applies to every node at start (an error names a node that fits none).
func (n Node) check() error {
	if n.Name == "" {
		return errors.New("name is missing")
	}
	if err := checkMAC(n.MAC); err != nil {
		return err
	}
	switch {
	case !n.Address.IsValid():
		return errors.New("address is missing")
	case !n.Address.Is4():
		return fmt.Errorf("address %s is not an IPv4 address", n.Address)
	}
	if n.TPM != nil {
		if want := NewTPM(n.TPM.EK, false, time.Time{}).EKSHA256; len(n.TPM.EK) == 0 || n.TPM.EKSHA256 != want {
			return fmt.Errorf("tpm: ek_sha256 %q is not the SHA-256 of ek (%q): the endorsement key was edited; remove \"tpm\" to record it again at the node's next boot", n.TPM.EKSHA256, want)
		}
	}
	return nil
}

// checkMAC wants mac as bootd stores it: a MAC in another spelling matches no request.
func checkMAC(mac string) error {
	norm, err := NormalizeMAC(mac)
	if err != nil {
		return fmt.Errorf("mac: %w", err)
	}
	if norm != mac {
		return fmt.Errorf("mac %q: write it as %q (lower case, colons), the form requests are matched in", mac, norm)
	}
	return nil
}
