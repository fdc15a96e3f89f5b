package spec

import "strconv"

// claim is one thing a layer provides, and where it says so.
type claim struct {
	kind  string // what is provided, e.g. package, uid
	value string
	verb  string // how a second provider is described: installed by, ...
	def   any    // for repos: the definition, since equal ones may repeat
	l     *Layer
	path  string // key path in l.Path
}

// checkProviders fails on the first thing, in build order, that two places
// provide: two layers, or a layer and its role.
func checkProviders(layers []*Layer, role string) error {
	first := map[string]claim{}
	for _, l := range layers {
		for _, c := range claims(l, role) {
			id := c.kind + "\x00" + c.value
			prev, ok := first[id]
			if !ok {
				first[id] = c
				continue
			}
			if c.def != nil && c.def == prev.def {
				continue
			}
			return errorAt(c.l.Path, c.l.paths, c.path, c.path, "%s %s is also %s %s:%d",
				c.kind, c.value, c.verb, prev.l.Path, prev.l.line(prev.path))
		}
	}
	return nil
}

func (l *Layer) line(path string) int {
	return (&reader{paths: l.paths}).line(path)
}

// claims lists what l provides in an image of role.
func claims(l *Layer, role string) []claim {
	var cs []claim
	add := func(kind, value, verb string, def any, path string) {
		cs = append(cs, claim{kind, value, verb, def, l, path})
	}
	for i, r := range l.Repos {
		add("repo", strconv.Quote(r.ID), "defined differently in", r, item("repos", i)+".id")
	}
	for i, g := range l.Groups {
		add("group", strconv.Quote(g.Name), "created by", nil, item("groups", i)+".name")
		add("gid", strconv.Itoa(g.GID), "given out by", nil, item("groups", i)+".gid")
	}
	for i, u := range l.Users {
		add("user", strconv.Quote(u.Name), "created by", nil, item("users", i)+".name")
		add("uid", strconv.Itoa(u.UID), "given out by", nil, item("users", i)+".uid")
	}
	cs = append(cs, partClaims(l, "", RoleParts{Packages: l.Packages, Services: l.Services, Files: l.Files})...)
	if p, ok := l.Roles[role]; ok {
		cs = append(cs, partClaims(l, "roles."+role+".", p)...)
	}
	return cs
}

// checkUserGroups wants each user's gid given to a group by its own layer
// or an earlier one, so that the group exists when the user is created.
func checkUserGroups(layers []*Layer) error {
	gids := map[int]bool{}
	for _, l := range layers {
		for _, g := range l.Groups {
			gids[g.GID] = true
		}
		for i, u := range l.Users {
			if !gids[u.GID] {
				path := item("users", i) + ".gid"
				return errorAt(l.Path, l.paths, path, path,
					"no group with gid %d in this or an earlier layer", u.GID)
			}
		}
	}
	return nil
}

// partClaims lists what a layer's parts for all roles (prefix "") or for
// one role (prefix roles.<role>.) provide.
func partClaims(l *Layer, prefix string, p RoleParts) []claim {
	var cs []claim
	add := func(kind, value, verb, path string) {
		cs = append(cs, claim{kind: kind, value: value, verb: verb, l: l, path: path})
	}
	for i, name := range p.Packages {
		add("package", strconv.Quote(name), "installed by", item(prefix+"packages", i))
	}
	for i, f := range p.Files {
		add("file", strconv.Quote(f.Path), "written by", item(prefix+"files", i)+".path")
	}
	for i, name := range p.Services.Enable {
		add("service", strconv.Quote(name), "enabled by", item(prefix+"services.enable", i))
	}
	return cs
}
