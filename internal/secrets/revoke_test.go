package secrets

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Holders as bootd names them: the machine's MAC and when the name was assigned to it.
const (
	holderA = "52:54:00:00:00:0a 2026-11-22T06:00:00Z"
	holderB = "52:54:00:00:00:0b 2026-11-22T07:00:00Z"
)

// publicKeys is the key part of each of keys' public lines.
func publicKeys(keys HostKeys) []string {
	var out []string
	for _, k := range keys {
		out = append(out, keyOnly(k.Public))
	}
	return out
}

func hostKeys(t *testing.T, s *Store, node, holder string) HostKeys {
	t.Helper()
	k, err := s.HostKeys(node, holder)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Keys follow the machine that holds the name: another holder gets fresh keys and the old ones
// are revoked; an empty holder (a name no machine holds yet) is taken over without revoking.
// The same store answers from memory, a restarted one from the files: both alike.
func TestHostKeysFollowTheirHolder(t *testing.T) {
	needKeygen(t)
	for _, tc := range []struct {
		name    string
		holders []string // who asks for c1's keys, in turn
		fresh   bool     // the last gets other keys than the first, and the first's are revoked
	}{
		{"same holder", []string{holderA, holderA}, false},
		{"another holder", []string{holderA, holderB}, true},
		{"no holder yet, then one", []string{"", holderA}, false},
		{"no holder yet, then one, then another", []string{"", holderA, holderB}, true},
		{"a holder, then a render that names none", []string{holderA, ""}, false},
		{"no holder, twice", []string{"", ""}, false},
	} {
		for _, restart := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, restart %v", tc.name, restart), func(t *testing.T) {
				holderChange(t, tc.holders, tc.fresh, restart)
			})
		}
	}
}

// holderChange asks for c1's keys as each of holders in turn (restarting the store between
// them): fresh says whether the last must get other keys than the first, and the first's be
// revoked.
func holderChange(t *testing.T, holders []string, fresh, restart bool) {
	state := t.TempDir()
	s := open(t, state)
	had := hostKeys(t, s, "c1", holders[0])
	now := had
	for _, h := range holders[1:] {
		if restart {
			s = open(t, state)
		}
		now = hostKeys(t, s, "c1", h)
	}
	if changed := now[0].Private != had[0].Private; changed != fresh {
		t.Fatalf("keys changed: %v, want %v", changed, fresh)
	}
	for _, r := range []*Store{s, open(t, state)} {
		revoked := r.RevokedHostKeys()
		if !fresh {
			if len(revoked) != 0 {
				t.Errorf("revoked %v, want none", revoked)
			}
			continue
		}
		if !slices.Equal(revoked, publicKeys(had)) {
			t.Errorf("revoked %v, want the first holder's %v", revoked, publicKeys(had))
		}
		for _, k := range publicKeys(now) {
			if slices.Contains(revoked, k) {
				t.Errorf("the new holder's key %s is revoked", k)
			}
		}
	}
}

// What the store hands out is the caller's: changing it changes nothing the store holds.
func TestAnswersAreCopies(t *testing.T) {
	needKeygen(t)
	state := t.TempDir()
	s := open(t, state)
	hostKeys(t, s, "c1", holderA)
	if err := s.Forget("c1"); err != nil {
		t.Fatal(err)
	}
	ask := func() (ClusterSecrets, HostKeys, []string) {
		c, err := s.Cluster()
		if err != nil {
			t.Fatal(err)
		}
		return c, hostKeys(t, s, "c2", holderA), s.RevokedHostKeys()
	}
	ask() // the store holds them now
	c, keys, revoked := ask()
	want := fmt.Sprint(c.MungeKey, keys[0].Private, revoked)
	c.MungeKey[0]++
	keys[0].Private = "changed"
	revoked[0] = "changed"
	if c, keys, revoked = ask(); fmt.Sprint(c.MungeKey, keys[0].Private, revoked) != want {
		t.Error("a caller's change to an answer reached the store")
	}
	// The list the store writes next still names the node each key came from.
	if err := s.Forget("c2"); err != nil {
		t.Fatal(err)
	}
	list, err := os.ReadFile(filepath.Join(state, "secrets", revokedFile))
	if err != nil || strings.Count(string(list), " c1\n") != len(HostKeyTypes) || strings.Count(string(list), " c2\n") != len(HostKeyTypes) {
		t.Errorf("the revoked list lost the nodes its keys came from (%v):\n%s", err, list)
	}
}

// Forget revokes before it removes, and the revoked list names the node each key came from. A
// Forget cut short leaves the whole directory (the next holder's claim forgets it again) or its
// renamed copy (Prune removes it), never a part of the keys a holder would be given.
func TestForgetRevokes(t *testing.T) {
	needKeygen(t)
	t.Run("forget", func(t *testing.T) {
		state := t.TempDir()
		s := open(t, state)
		old := hostKeys(t, s, "c1", holderA)
		if err := s.Forget("c1"); err != nil {
			t.Fatal(err)
		}
		if got := s.RevokedHostKeys(); !slices.Equal(got, publicKeys(old)) {
			t.Fatalf("revoked %v, want c1's %v", got, publicKeys(old))
		}
		list, err := os.ReadFile(filepath.Join(state, "secrets", revokedFile))
		if err != nil || strings.Count(string(list), " c1\n") != len(HostKeyTypes) {
			t.Errorf("the revoked list does not name c1 for each key (%v):\n%s", err, list)
		}
		if fresh := hostKeys(t, s, "c1", holderB); fresh[0].Private == old[0].Private {
			t.Error("the next holder got the forgotten keys")
		}
		if err := s.Forget("c9"); err != nil {
			t.Errorf("forgetting a node without keys: %v", err)
		}
	})
	t.Run("cut short after revoking", func(t *testing.T) {
		s := open(t, t.TempDir())
		old := hostKeys(t, s, "c1", holderA)
		dir, _ := s.nodeDir("c1")
		s.mu.Lock()
		err := s.revoke(dir, "c1") // forget's first step; the crash comes before the rename
		s.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		fresh := hostKeys(t, s, "c1", holderB)
		for i := range fresh {
			if fresh[i].Private == old[i].Private {
				t.Errorf("revoked %s key handed to the next holder", fresh[i].Type)
			}
		}
	})
	t.Run("cut short after the rename", func(t *testing.T) {
		state := t.TempDir()
		s := open(t, state)
		hostKeys(t, s, "c1", holderA)
		hosts := filepath.Join(state, "secrets", "hosts")
		if err := os.Rename(filepath.Join(hosts, "c1"), filepath.Join(hosts, goneDir+"c1")); err != nil {
			t.Fatal(err)
		}
		if err := s.Prune(nil, nil); err != nil {
			t.Fatal(err)
		}
		if entries, _ := os.ReadDir(hosts); len(entries) != 0 {
			t.Errorf("left after Prune: %v", entries)
		}
	})
}

// Prune redoes the Forget of every node whose keys another holder has now, or that the inventory
// released; a node it merely lacks keeps its keys.
func TestPrune(t *testing.T) {
	needKeygen(t)
	s := open(t, t.TempDir())
	c1 := hostKeys(t, s, "c1", holderA)    // still c1's machine
	c2 := hostKeys(t, s, "c2", holderA)    // c2 now on machine B: the Forget was lost
	c3 := hostKeys(t, s, "c3", holderB)    // c3 unassigned since
	c4 := hostKeys(t, s, "c4", holderB)    // missing from an inventory that lost it
	master := hostKeys(t, s, "master", "") // no machine yet
	if err := s.Prune(map[string]string{"c1": holderA, "c2": holderB}, []string{"c3"}); err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(publicKeys(c2), publicKeys(c3))
	if got := s.RevokedHostKeys(); !slices.Equal(got, want) {
		t.Errorf("revoked %v, want c2's and c3's %v", got, want)
	}
	for _, tc := range []struct {
		node, holder string
		had          HostKeys
		kept         bool
	}{{"c1", holderA, c1, true}, {"c2", holderB, c2, false}, {"c3", holderB, c3, false}, {"c4", holderB, c4, true}, {"master", "", master, true}} {
		if now := hostKeys(t, s, tc.node, tc.holder); (now[0].Private == tc.had[0].Private) != tc.kept {
			t.Errorf("%s: keys kept %v, want %v", tc.node, !tc.kept, tc.kept)
		}
	}
}
