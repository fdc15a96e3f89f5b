package spec

// Site holds one site's overrides of the layers' repositories: mirrors
// live here, so that layers keep naming the real locations.
type Site struct {
	Repos map[string]RepoOverride // by repo id

	path  string
	paths map[string]int
}

// RepoOverride replaces the fields that are set (non-nil).
type RepoOverride struct {
	BaseURL, GPGKey, Archive *string
	GPGCheck                 *bool
}

// LoadSite reads and checks the site file at path. Whether each repo id
// exists is for Resolve to say, which knows the image's layers.
func LoadSite(path string) (*Site, error) {
	r, t, err := open(path)
	if err != nil {
		return nil, err
	}
	t.only("repos")
	s := &Site{Repos: map[string]RepoOverride{}, path: path, paths: r.paths}
	repos := t.sub("repos")
	for _, id := range repos.keys() {
		check(repos, id, checkRepoID(id))
		s.Repos[id] = readOverride(repos.sub(id))
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return s, nil
}

func readOverride(t table) RepoOverride {
	t.only("baseurl", "gpgkey", "gpgcheck", "archive")
	o := RepoOverride{BaseURL: t.optStr("baseurl"), GPGKey: t.optStr("gpgkey"), GPGCheck: t.optBool("gpgcheck"), Archive: t.optStr("archive")}
	if o.BaseURL != nil {
		check(t, "baseurl", checkRepoURL(*o.BaseURL))
	}
	if o.GPGKey != nil && *o.GPGKey != "" {
		check(t, "gpgkey", checkRepoURL(*o.GPGKey))
	}
	if o.Archive != nil && *o.Archive != "" {
		check(t, "archive", checkArchive(*o.Archive))
	}
	return o
}

// override returns the override for repo id, if s has one.
func (s *Site) override(id string) (RepoOverride, bool) {
	if s == nil {
		return RepoOverride{}, false
	}
	o, ok := s.Repos[id]
	return o, ok
}

// apply returns repo with the override for its id, if any.
func (s *Site) apply(repo Repo) Repo {
	o, ok := s.override(repo.ID)
	if !ok {
		return repo
	}
	if o.BaseURL != nil {
		repo.BaseURL = *o.BaseURL
	}
	if o.GPGKey != nil {
		repo.GPGKey = *o.GPGKey
	}
	if o.GPGCheck != nil {
		repo.GPGCheck = *o.GPGCheck
	}
	if o.Archive != nil {
		repo.Archive = *o.Archive
	}
	return repo
}
