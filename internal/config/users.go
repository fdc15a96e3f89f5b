package config

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/labcluster/gpucluster/internal/tomlpos"
)

// User is a lab member's account: bootd-node makes it on every node with the same ids, so a
// job runs as its user on any compute and the home the master exports is theirs everywhere.
type User struct {
	Name    string   // the [users.NAME] table's name
	UID     int      // also the gid of the user's own group, named after the user
	Comment string   // GECOS: the person's name; "" for none
	Shell   string   // login shell; default /bin/bash
	SSHKeys []string // OpenSSH public keys ("ssh-ed25519 AAAA... alice@laptop") that log in as the user
}

// Lab users' ids: Rocky's UID_MIN and UID_MAX (login.defs), apart from the images' system
// accounts (munge 900, slurm 901) and from nobody (65534).
const (
	minUID = 1000
	maxUID = 60000
)

// userFields are the keys of a [users.NAME] table.
var userFields = map[string]func(u *User, v any) error{
	"uid":      func(u *User, v any) (err error) { u.UID, err = asInt(v); return err },
	"comment":  func(u *User, v any) (err error) { u.Comment, err = asString(v); return err },
	"shell":    func(u *User, v any) (err error) { u.Shell, err = asString(v); return err },
	"ssh_keys": func(u *User, v any) (err error) { u.SSHKeys, err = asStrings(v); return err },
}

// setUser stores key k (under [users]) in c: the [users] table, a user's table, or a user's field.
func (c *Config) setUser(k toml.Key, v any) error {
	if len(k) < 3 {
		if _, ok := v.(map[string]any); !ok {
			return fmt.Errorf("want a table ([%s]), got %s", k, tomlpos.TypeName(v))
		}
		if len(k) == 2 {
			c.user(k[1])
		}
		return nil
	}
	set, ok := userFields[k[2]]
	if len(k) > 3 || !ok {
		return fmt.Errorf("unknown key (known in [users.NAME]: %s)", strings.Join(slices.Sorted(maps.Keys(userFields)), ", "))
	}
	return set(c.user(k[1]), v)
}

// user returns the user called name, added with the defaults if c has none yet.
func (c *Config) user(name string) *User {
	i := slices.IndexFunc(c.Users, func(u User) bool { return u.Name == name })
	if i < 0 {
		c.Users = append(c.Users, User{Name: name, Shell: "/bin/bash"})
		i = len(c.Users) - 1
	}
	return &c.Users[i]
}

// checkUsers wants each user to be one that useradd makes alike on every node: a valid name, a
// uid of its own in the lab range, and comment, shell and keys that fit their one line each.
func (c Config) checkUsers() error {
	uids := map[int]string{}
	for _, u := range c.Users {
		key := toml.Key{"users", u.Name}.String() // quoted as the file's line table has it
		_, uidSet := c.fileLine(key + ".uid")
		switch {
		case !validUserName(u.Name):
			return c.err(key, "%q is not a user name (lowercase letters, digits, _ and -, starting with a letter or _, at most 32)", u.Name)
		case u.UID == 0 && !uidSet:
			return c.err(key, "no uid (every node gives the user the same one: uid = 2001)")
		case u.UID < minUID || u.UID >= maxUID:
			return c.err(key+".uid", "%d is outside the lab users' ids %d–%d (below are the images' system accounts)", u.UID, minUID, maxUID-1)
		case uids[u.UID] != "":
			return c.errorf([]string{toml.Key{"users", uids[u.UID], "uid"}.String(), key + ".uid"}, "%d is also %s's uid", u.UID, uids[u.UID])
		case strings.ContainsAny(u.Comment, ":\\") || hasControl(u.Comment):
			return c.err(key+".comment", "%q holds a ':', a '\\' or a control character, which /etc/passwd cannot", u.Comment)
		case !strings.HasPrefix(u.Shell, "/") || strings.ContainsAny(u.Shell, ": \\") || hasControl(u.Shell):
			return c.err(key+".shell", "%q is not an absolute path to a shell (e.g. /bin/bash)", u.Shell)
		}
		uids[u.UID] = u.Name
		for i, k := range u.SSHKeys {
			if err := checkPublicKey(k); err != nil {
				return c.err(key+".ssh_keys", "item %d: %v", i+1, err)
			}
		}
	}
	return nil
}

// validUserName follows useradd's default rule (shadow-utils' is_valid_user_name), lowercase only.
func validUserName(s string) bool {
	if s == "" || len(s) > 32 || !(s[0] >= 'a' && s[0] <= 'z' || s[0] == '_') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= 'a' && s[i] <= 'z' || s[i] >= '0' && s[i] <= '9' || s[i] == '_' || s[i] == '-') {
			return false
		}
	}
	return true
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// publicKeyTypes are the key types OpenSSH 8.7 (Rocky 9) accepts in authorized_keys.
var publicKeyTypes = []string{
	"ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
	"sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
}

// checkPublicKey wants one OpenSSH public key line, "TYPE BASE64 [COMMENT]", whose key data
// names the same type (RFC 4253 6.6: a length-prefixed type string first). It checks the form
// here (x/crypto/ssh is not a dependency), so a pasted private key, a truncated line or an
// options prefix is refused at load instead of silently not logging anyone in.
func checkPublicKey(line string) error {
	fields := strings.Fields(line)
	switch {
	case strings.ContainsAny(line, "\n\r"):
		return fmt.Errorf("one key per item: it holds a line break")
	case len(fields) < 2 || !slices.Contains(publicKeyTypes, fields[0]):
		return fmt.Errorf("%.40q is not an SSH public key (want the line of a .pub file: \"ssh-ed25519 AAAA... name@host\"; no options)", line)
	}
	blob, err := base64.StdEncoding.DecodeString(fields[1])
	if err != nil {
		return fmt.Errorf("the %s key's data is not base64: is the line cut short?", fields[0])
	}
	parts, ok := wireStrings(blob)
	switch {
	case !ok || len(parts) < 2:
		return fmt.Errorf("the %s key's data is incomplete: is the line cut short?", fields[0])
	case string(parts[0]) != fields[0]:
		return fmt.Errorf("the line says %s, its key data %.40q", fields[0], parts[0])
	}
	return nil
}

// wireStrings splits an SSH public key blob into its length-prefixed fields (RFC 4251 5: every
// key type is a sequence of strings and mpints), and says whether they fill it exactly.
func wireStrings(blob []byte) ([][]byte, bool) {
	var parts [][]byte
	for len(blob) > 0 {
		if len(blob) < 4 {
			return nil, false
		}
		n := binary.BigEndian.Uint32(blob)
		if uint64(n) > uint64(len(blob)-4) {
			return nil, false
		}
		parts, blob = append(parts, blob[4:4+n]), blob[4+n:]
	}
	return parts, true
}
