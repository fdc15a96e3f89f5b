package bootd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/ctl"
	"github.com/labcluster/gpucluster/internal/inventory"
	"github.com/labcluster/gpucluster/internal/secrets"
)

// StartOptions are choices for one start of bootd, made on serve's command line; unlike the
// configuration they do not last beyond it.
type StartOptions struct {
	// EmptyInventory starts bootd without an inventory file although the state directory holds
	// secrets of an earlier run (a lost or deleted inventory.json): with no nodes, and with the
	// host keys of the nodes it had left as they are, unrevoked, until their names are assigned
	// again. Without it bootd refuses to start then.
	EmptyInventory bool
}

// stateFiles are the files bootd keeps directly in its state directory (the secrets directory is
// checked by secrets.Open, the images directory belongs to imgbuild).
var stateFiles = []string{"inventory.json", "inventory.json.journal", "bootd.lock", ctl.SocketName}

// prepareStateDir makes the state directory, or checks the one there, before bootd reads
// anything in it: it and each file bootd keeps in it must belong to bootd's user and be
// writable by no one else, and no directory above it may be writable by another user (who could
// swap it); its read bits for group and others are dropped. A directory that fails is refused,
// not tightened: another local user may have planted an inventory or a munge key there (one
// that was world-writable before bootd's first start was tightened and its planted key served).
func prepareStateDir(dir string) error {
	if err := checkAncestors(dir); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state dir %s is not a directory", dir)
	}
	if err := checkOwnedNotShared(dir, fi, "state dir"); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	for _, name := range stateFiles {
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		if err := checkOwnedNotShared(p, fi, "state file"); err != nil {
			return err
		}
	}
	return nil
}

// checkOwnedNotShared refuses p (whose info is fi) when another user owns it or group or others
// may write it.
func checkOwnedNotShared(p string, fi fs.FileInfo, what string) error {
	uid, me := fi.Sys().(*syscall.Stat_t).Uid, os.Geteuid()
	if int(uid) != me {
		return fmt.Errorf("%s %s belongs to uid %d, not to bootd's (uid %d): another user could have put files in it; check what it holds, then chown it", what, p, uid, me)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%s %s has mode %04o, writable by group or others: another local user could have planted files in it (an inventory, a munge key); check what it holds, then chmod go-w %s", what, p, perm, p)
	}
	return nil
}

// checkAncestors refuses a state directory below one that another user owns, or that group or
// others may write without the sticky bit (/tmp has it): they could rename it and put their own
// in its place.
func checkAncestors(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		uid := fi.Sys().(*syscall.Stat_t).Uid
		if uid != 0 && int(uid) != os.Geteuid() {
			return fmt.Errorf("state dir %s is inside %s, which belongs to uid %d: that user could replace it; put the state dir elsewhere", dir, p, uid)
		}
		if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
			return fmt.Errorf("state dir %s is inside %s, which group or others may write (mode %04o): they could replace it; put the state dir elsewhere", dir, p, fi.Mode().Perm())
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// openState opens the inventory and the secrets in the state directory, and finishes what a
// crash may have cut short: the inventory's journal is folded into its file, and the host keys
// of names that changed machines are forgotten. It refuses a missing inventory beside secrets of
// an earlier run unless o says to start without one. Host keys are revoked only for names the
// inventory gives to another machine or records as released (secrets.Store.Prune), never for
// names it merely lacks: a lost, emptied or old inventory revokes nothing, and such names keep
// their keys until they are assigned again (inventory.Open refuses "{}", "null" and the like).
func openState(dir string, o StartOptions, log logrus.FieldLogger) (*inventory.Store, *secrets.Store, error) {
	inv, err := inventory.Open(filepath.Join(dir, "inventory.json"))
	if err != nil {
		return nil, nil, err
	}
	sec, err := secrets.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	held, err := sec.Held()
	if err != nil {
		return nil, nil, err
	}
	if !inv.Found() {
		empty, err := sec.Empty()
		if err != nil {
			return nil, nil, err
		}
		if !empty && !o.EmptyInventory {
			return nil, nil, fmt.Errorf("state dir %s has secrets of an earlier run (%s) but no inventory.json: restore it from a backup (bootd's own state is whole after a clean stop), or start with --empty-inventory to begin with no nodes, keeping their host keys", dir, heldText(held))
		}
		if err := inv.WriteFile(); err != nil {
			return nil, nil, fmt.Errorf("inventory: %w", err)
		}
		if len(held) > 0 {
			log.WithField("nodes", strings.Join(held, ",")).Warn("started without an inventory (--empty-inventory): the secrets hold host keys of these nodes, kept and not revoked (they are revoked when their name is assigned to another machine)")
		}
	} else if err := inv.Compact(); err != nil {
		return nil, nil, fmt.Errorf("inventory: fold the journal into the file: %w", err)
	}
	released := inv.Released()
	if err := sec.Prune(holders(inv), released); err != nil {
		return nil, nil, fmt.Errorf("host keys of names that changed machines: %w", err)
	}
	for _, name := range released {
		if err := inv.Forgotten(name); err != nil {
			return nil, nil, fmt.Errorf("inventory: %w", err)
		}
	}
	missing, err := sec.Missing()
	if err != nil {
		return nil, nil, err
	}
	for _, m := range missing {
		log.WithField("secret", filepath.Join(sec.Dir(), m)).Warn(missingWhy[m])
	}
	if err := warnLostTokenKey(inv, sec, log); err != nil {
		return nil, nil, err
	}
	return inv, sec, nil
}

// warnLostTokenKey says so when nodes with a TPM are recorded but the node-token key is gone: a
// new key is made at the next request, and those nodes' hello and reports are refused until each
// boots again and fetches a token made with it.
func warnLostTokenKey(inv *inventory.Store, sec *secrets.Store, log logrus.FieldLogger) error {
	nodes, _ := inv.Snapshot()
	var tpm []string
	for _, n := range nodes {
		if n.TPM != nil {
			tpm = append(tpm, n.Name)
		}
	}
	if len(tpm) == 0 {
		return nil
	}
	has, err := sec.HasNodeTokenKey()
	if err != nil || has {
		return err
	}
	log.WithFields(logrus.Fields{"secret": filepath.Join(sec.Dir(), "node-token.key"), "nodes": strings.Join(tpm, ",")}).
		Warn("the node-token key is missing (deleted?) while these nodes have a TPM on record: bootd makes a new one; their hello and hardware reports are refused until each boots again (or runs /usr/libexec/bootd-node overlay)")
	return nil
}

// missingWhy says what a deleted cluster secret means, for the start's log.
var missingWhy = map[string]string{
	"munge.key":       "the munge key is missing beside the other secrets (deleted?): bootd makes a new one at the first node's request; every node must then fetch its files again (reboot, or run /usr/libexec/bootd-node overlay) before munge and Slurm work across nodes again",
	"host_ca_ed25519": "the SSH host CA is missing beside the other secrets (deleted?): bootd makes a new one at the first node's request and signs every host certificate again; SSH clients trust the new CA once nodes fetch their files again",
	"root_ed25519":    "root's cluster SSH key is missing beside the other secrets (deleted?): bootd makes a new one at the first node's request; root's SSH between nodes works again once every node has fetched its files again",
}

func heldText(held []string) string {
	if len(held) == 0 {
		return "cluster keys"
	}
	return "host keys of " + strings.Join(held, ", ")
}
