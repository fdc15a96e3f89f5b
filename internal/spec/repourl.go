package spec

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Repository URLs may name dnf's variables, which Resolve fills in from the image:
// $releasever (the image's releasever, e.g. "9.8": the pinned minor release) and $basearch
// (its arch). Any other variable is an error at load: dnf would leave it in the URL, and the
// first sign would be a 404 at lock time.
var (
	urlVarRe  = regexp.MustCompile(`\$(\{[A-Za-z0-9_]*\}|[A-Za-z0-9_]*)`)
	urlVars   = []string{"releasever", "basearch"}
	archiveRe = regexp.MustCompile(`\{([^{}]*)\}`)
)

// ArchiveFields are the per-package fields an archive template may name, filled in at lock
// time from the package dnf chose: its location relative to the baseurl, its file name and
// arch, and the name, version and release of the source package it was built from (the build
// as Koji files it).
var ArchiveFields = []string{"location", "file", "arch", "source_name", "source_version", "source_release"}

// checkURLVars accepts only the variables Resolve knows.
func checkURLVars(s string) string {
	for _, m := range urlVarRe.FindAllStringSubmatch(s, -1) {
		name := strings.Trim(m[1], "{}")
		if !slices.Contains(urlVars, name) {
			return fmt.Sprintf("unknown variable $%s in %q (known: $releasever, $basearch)", name, s)
		}
	}
	return ""
}

// checkRepoURL is checkURL for a repository's baseurl or gpgkey, which may name variables.
func checkRepoURL(s string) string {
	if msg := checkURLVars(s); msg != "" {
		return msg
	}
	return checkURL(expandVars(s, "9", "x86_64"))
}

// checkArchive accepts an archive template: an http(s) or file URL once its variables and
// fields are filled in, naming only known fields, and at least one of them (a template
// without a field would name one file for every package).
func checkArchive(s string) string {
	if msg := checkURLVars(s); msg != "" {
		return msg
	}
	expanded := expandVars(s, "9", "x86_64") // ${releasever} is a variable, not a field
	fields := archiveRe.FindAllStringSubmatch(expanded, -1)
	if len(fields) == 0 {
		return fmt.Sprintf("archive %q names no package field (want e.g. {location}; fields: %s)", s, strings.Join(ArchiveFields, ", "))
	}
	for _, f := range fields {
		if !slices.Contains(ArchiveFields, f[1]) {
			return fmt.Sprintf("unknown field {%s} in archive %q (fields: %s)", f[1], s, strings.Join(ArchiveFields, ", "))
		}
	}
	filled := archiveRe.ReplaceAllString(expanded, "x")
	if strings.ContainsAny(filled, "{}") {
		return fmt.Sprintf("archive %q: unbalanced braces", s)
	}
	return checkURL(filled)
}

// expandVars fills in $releasever and $basearch (also spelled ${releasever}, ${basearch}).
func expandVars(s, releasever, arch string) string {
	return urlVarRe.ReplaceAllStringFunc(s, func(v string) string {
		switch strings.Trim(v[1:], "{}") {
		case "releasever":
			return releasever
		case "basearch":
			return arch
		}
		return v
	})
}

// FillArchive fills an archive template's fields from values (field -> value); a field
// without a value is an error, naming it.
func FillArchive(template string, values map[string]string) (string, error) {
	var missing string
	out := archiveRe.ReplaceAllStringFunc(template, func(f string) string {
		v, ok := values[f[1:len(f)-1]]
		if !ok || v == "" {
			missing = f
		}
		return v
	})
	if missing != "" {
		return "", fmt.Errorf("archive %q: no value for %s", template, missing)
	}
	return out, nil
}

// expand returns r with its URLs' variables filled in for the image.
func (r Repo) expand(img *Image) Repo {
	r.Name = expandVars(r.Name, img.ReleaseVer, img.Arch)
	r.BaseURL = expandVars(r.BaseURL, img.ReleaseVer, img.Arch)
	r.GPGKey = expandVars(r.GPGKey, img.ReleaseVer, img.Arch)
	r.Archive = expandVars(r.Archive, img.ReleaseVer, img.Arch)
	return r
}
