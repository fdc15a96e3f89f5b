package resolve_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/resolve"
)

const hexA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func sampleLock() *resolve.LockFile {
	return &resolve.LockFile{
		Image: "compute", SpecDigest: specDigest, SourceDateEpoch: 1700000000,
		ReleaseVer: "9", Arch: "x86_64",
		Repos: []resolve.LockRepo{{ID: "baseos", BaseURL: "https://dl.rockylinux.org/pub/rocky/9/BaseOS/x86_64/os/"}},
		Layers: []resolve.LockLayer{{Name: "base", Digest: "sha256:aa", Packages: []resolve.Package{
			{Name: "bash", Version: "5.1.8", Release: "9.el9", Arch: "x86_64", Repo: "baseos", Location: "Packages/b/bash-5.1.8-9.el9.x86_64.rpm", SHA256: hexA},
		}}},
	}
}

func TestReadIsStrict(t *testing.T) {
	good, err := sampleLock().Bytes()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, from, to, want string
	}{
		{"unknown field", `"image"`, `"colour": 1, "image"`, `unknown field "colour"`},
		{"format", `"format": 2`, `"format": 1`, "format 1"},
		{"bad sha256", hexA, "abc", "packages[0] (bash): sha256"},
		{"location escapes", "Packages/b/", "../", `location "../bash`},
		{"absolute location", "Packages/b/", "/", "location"},
		{"unknown repo", `"repo": "baseos"`, `"repo": "epel"`, `repo "epel": not in repos`},
		{"missing version", `"version": "5.1.8"`, `"version": ""`, "version: missing"},
		{"bad spec digest", specDigest, "sha256:zz", "spec_digest"},
		{"zero epoch, which rpm ignores", `"source_date_epoch": 1700000000`, `"source_date_epoch": 0`, "source_date_epoch: 0 is not a positive Unix time"},
		{"negative epoch", `"source_date_epoch": 1700000000`, `"source_date_epoch": -1`, "source_date_epoch: -1 is not"},
		{"no epoch", `"source_date_epoch": 1700000000,`, ``, "source_date_epoch: 0 is not"},
		{"trailing data", "}\n", "}\n{}", "data after"},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := string(good)
			if tt.name == "trailing data" {
				data += "{}"
			} else {
				if !strings.Contains(data, tt.from) {
					t.Fatalf("fixture lacks %q", tt.from)
				}
				data = strings.Replace(data, tt.from, tt.to, 1)
			}
			p := filepath.Join(dir, "x.lock.json")
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := resolve.Read(p)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("err %v, want one naming %s and %q", err, p, tt.want)
			}
		})
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "compute.lock.json")
	l := sampleLock()
	if err := l.Write(p); err != nil {
		t.Fatal(err)
	}
	back, err := resolve.Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if back.Digest() != l.Digest() || !strings.HasPrefix(l.Digest(), "sha256:") {
		t.Errorf("digest %s after round trip, was %s", back.Digest(), l.Digest())
	}
	bad := sampleLock()
	bad.Layers[0].Packages[0].SHA256 = "nope"
	if err := bad.Write(p); err == nil {
		t.Error("wrote an invalid lock")
	}
	if _, err := resolve.Read(p); err != nil {
		t.Errorf("a refused write damaged the lock on disk: %v", err)
	}
}

// TestCheckFresh: a lock is fresh only when its spec digest and its layers (count, names, order,
// digests) are the image's; builds take its layers one to one for the image's.
func TestCheckFresh(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "images")
	os.MkdirAll(dir, 0o755)
	p := filepath.Join(dir, "compute.lock.json")
	lock := sampleLock()
	lock.Layers = append(lock.Layers, resolve.LockLayer{Name: "nfs", Digest: "sha256:cc"})
	if err := lock.Write(p); err != nil {
		t.Fatal(err)
	}
	l, err := resolve.Read(p)
	if err != nil {
		t.Fatal(err)
	}
	other := "sha256:" + hexA
	base, nfs := resolve.LayerRef{Name: "base", Digest: "sha256:aa"}, resolve.LayerRef{Name: "nfs", Digest: "sha256:cc"}
	mpi := resolve.LayerRef{Name: "mpi", Digest: "sha256:dd"}
	stale := p + " is stale: the layers or image changed since it was locked ("
	wrong := p + " does not match its image: its spec_digest is current but its layers are not the image's ("
	tests := []struct {
		name   string
		digest string
		layers []resolve.LayerRef
		want   string // "" for fresh
	}{
		{"fresh", specDigest, []resolve.LayerRef{base, nfs}, ""},
		{"image changed", other, []resolve.LayerRef{base, nfs}, stale + "image definition or input files changed); run imgbuild lock " + filepath.Join(dir, "compute.toml")},
		{"layer changed", other, []resolve.LayerRef{{"base", "sha256:bb"}, nfs}, stale + "layer base changed)"},
		{"layer added", other, []resolve.LayerRef{base, nfs, mpi}, stale + "layer mpi added)"},
		{"layer removed", other, []resolve.LayerRef{base}, stale + "layer nfs removed)"},
		{"layers reordered", other, []resolve.LayerRef{nfs, base}, stale + "layer order changed)"},
		{"lock lacks a layer, digest current", specDigest, []resolve.LayerRef{base, nfs, mpi}, wrong + "layer mpi added)"},
		{"lock has a layer more, digest current", specDigest, []resolve.LayerRef{base}, wrong + "layer nfs removed)"},
		{"lock reordered, digest current", specDigest, []resolve.LayerRef{nfs, base}, wrong + "layer order changed)"},
		{"lock layer digest edited, digest current", specDigest, []resolve.LayerRef{base, {"nfs", "sha256:ee"}}, wrong + "layer nfs changed)"},
		{"no layers given", specDigest, nil, wrong + "layer base removed; layer nfs removed)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := l.CheckFresh(tt.digest, tt.layers)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("fresh lock refused: %v", err)
				}
				return
			}
			var se *resolve.StaleError
			if !errors.As(err, &se) || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("err %v, want a StaleError starting %q", err, tt.want)
			}
		})
	}
	unread := sampleLock()
	want := "images/compute.lock.json is stale: the layers or image changed since it was locked (image definition or input files changed); run imgbuild lock images/compute.toml"
	if err := unread.CheckFresh(other, []resolve.LayerRef{base}); err == nil || err.Error() != want {
		t.Errorf("err %v, want %q", err, want)
	}
}
