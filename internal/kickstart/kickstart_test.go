package kickstart_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/labcluster/gpucluster/internal/imgbuild"
	"github.com/labcluster/gpucluster/internal/kickstart"
	"github.com/labcluster/gpucluster/internal/resolve"
	"github.com/labcluster/gpucluster/internal/spec"
	"github.com/labcluster/gpucluster/internal/testkit/golden"
	kickstartfs "github.com/labcluster/gpucluster/kickstart"
)

// templates are the repository's kickstart/, read from disk so that a test
// sees the templates as edited, not as last embedded.
var templates = os.DirFS("../../kickstart")

// realPlan resolves one of the repository's images against its layers.
func realPlan(t *testing.T, image string) *spec.Plan {
	t.Helper()
	img, err := spec.LoadImage(filepath.Join("../../images", image+".toml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := spec.Resolve(img, "../../layers", nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeLock pins a couple of packages per layer (a made-up one for a layer
// with no packages), as a real lock would, fresh for plan.
func fakeLock(p *spec.Plan) *resolve.LockFile {
	lock := &resolve.LockFile{Format: resolve.LockFormat, Image: p.Image.Name, SpecDigest: "sha256:" + p.LockDigest(),
		SourceDateEpoch: 1767225600, ReleaseVer: "9", Arch: "x86_64"}
	for _, r := range p.Repos() {
		lock.Repos = append(lock.Repos, resolve.LockRepo{ID: r.ID, BaseURL: r.BaseURL})
	}
	for _, l := range p.Layers {
		names := append(slices.Clone(l.Packages[:min(2, len(l.Packages))]), l.Name+"-dep")
		ll := resolve.LockLayer{Name: l.Name, Digest: l.Digest}
		for i, n := range names {
			ll.Packages = append(ll.Packages, resolve.Package{Name: n, Version: fmt.Sprintf("1.%d", i), Release: "1.el9",
				Arch: "x86_64", Repo: "baseos", Location: "Packages/" + n + ".rpm", SHA256: strings.Repeat("0", 64)})
		}
		lock.Layers = append(lock.Layers, ll)
	}
	return lock
}

// The reference lab's master and first compute.
var nodes = map[string]kickstart.NodeInfo{
	"master": {Name: "master", Role: "master", Address: netip.MustParseAddr("10.80.0.2"),
		Netmask: netip.MustParseAddr("255.255.255.0"), Gateway: netip.MustParseAddr("10.80.0.254"),
		DNS: []netip.Addr{netip.MustParseAddr("10.80.0.254"), netip.MustParseAddr("9.9.9.9")}, Domain: "lab.example",
		MAC: "52:54:00:AA:00:02", BootdURL: "http://10.80.0.1"},
	"c1": {Name: "c1", Role: "compute", Address: netip.MustParseAddr("10.80.0.11"),
		Netmask: netip.MustParseAddr("255.255.255.0"), MAC: "52-54-00-aa-00-11", BootdURL: "http://10.80.0.1:8080"},
}

func nodeKickstart(t *testing.T, node string) []byte {
	t.Helper()
	n := nodes[node]
	p := realPlan(t, n.Role)
	body, err := render(t, p, fakeLock(p), templates)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := kickstart.Node(body, n, templates)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func TestGolden(t *testing.T) {
	for _, node := range []string{"master", "c1"} {
		t.Run(node, func(t *testing.T) {
			got := nodeKickstart(t, node)
			golden.Check(t, filepath.Join("testdata", node+".ks"), got)
		})
	}
}

// TestStructure checks what a kickstart parser would: see checkStructure.
func TestStructure(t *testing.T) {
	for _, node := range []string{"master", "c1"} {
		t.Run(node, func(t *testing.T) {
			if err := kickstart.CheckStructure(string(nodeKickstart(t, node))); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestNoSecret: the kickstart is served over plain HTTP to whoever asks;
// keys reach the node from bootd's overlay only.
func TestNoSecret(t *testing.T) {
	for _, node := range []string{"master", "c1"} {
		t.Run(node, func(t *testing.T) {
			ks := string(nodeKickstart(t, node))
			for _, bad := range []string{"PRIVATE KEY", "/etc/munge/munge.key", "ssh_host_", "--password", "--iscrypted", "$6$", "$y$"} {
				if strings.Contains(ks, bad) {
					t.Errorf("kickstart contains %q", bad)
				}
			}
			if !strings.Contains(ks, "\nrootpw --lock\n") {
				t.Error("root's password is not locked")
			}
		})
	}
}

// TestPinned: every locked package, and nothing else but the extras, is in
// %packages with its exact version.
func TestPinned(t *testing.T) {
	p := realPlan(t, "compute")
	lock := fakeLock(p)
	body, err := render(t, p, lock, templates)
	if err != nil {
		t.Fatal(err)
	}
	pkgs := sectionLines(string(body), "%packages")
	want := map[string]bool{}
	for _, l := range lock.Layers {
		for _, pkg := range l.Packages {
			want[fmt.Sprintf("%s-%s-%s.%s", pkg.Name, pkg.Version, pkg.Release, pkg.Arch)] = true
		}
	}
	for _, e := range kickstart.Extras {
		want[e] = true
	}
	for _, line := range pkgs {
		if !want[line] {
			t.Errorf("%%packages lists %q", line)
		}
		delete(want, line)
	}
	for w := range want {
		t.Errorf("%%packages lacks %s", w)
	}
}

// sectionLines returns the non-comment lines of the first section opened by header.
func sectionLines(ks, header string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(ks, "\n") {
		switch {
		case strings.HasPrefix(line, header):
			in = true
		case in && line == "%end":
			return out
		case in && line != "" && !strings.HasPrefix(line, "#"):
			out = append(out, line)
		}
	}
	return out
}

// TestEmbedded: the templates bootd is built with render as the ones on disk.
func TestEmbedded(t *testing.T) {
	n := nodes["c1"]
	p := realPlan(t, n.Role)
	body, err := render(t, p, fakeLock(p), kickstartfs.FS)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := kickstart.Node(body, n, kickstartfs.FS)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ks, nodeKickstart(t, "c1")) {
		t.Error("the embedded templates differ from kickstart/ on disk")
	}
}

// render is imgbuild's view of plan as lock pins it, rendered.
func render(t *testing.T, p *spec.Plan, lock *resolve.LockFile, templates fs.FS) ([]byte, error) {
	t.Helper()
	img, err := imgbuild.KickstartImage(p, lock)
	if err != nil {
		return nil, err
	}
	return kickstart.Render(img, templates)
}
