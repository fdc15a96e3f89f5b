//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/resolve"
	"github.com/labcluster/gpucluster/internal/spec"
	"github.com/labcluster/gpucluster/internal/testkit/testrepo"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// TestRealRepos locks and builds both images from the shipped layers and images, unchanged and
// with no site file, against their real repository addresses: inside the lab's network
// namespace, and a mount namespace whose /etc/hosts and CA bundle are the test's, every host a
// layer names (Rocky, EPEL, Koji, NVIDIA, OpenHPC, GitHub for OpenHPC's key) is a local HTTPS
// server holding stand-in RPMs at the real paths, signed with a test key per repository key URL,
// and the keys at those URLs. gpgcheck stays on for every repo. Then: a lock whose mirror has
// dropped every package still builds, byte-identical, from Rocky's vault and Koji, or from the
// package archive; a package signed with another key, a key URL serving the wrong key and a key
// URL that is gone are each refused, naming the layer's gpgkey line.
func TestRealRepos(t *testing.T) {
	testrepo.NeedTools(t, "dnf", "rpmsign", "gpg", "unshare", "mksquashfs", "unsquashfs", "cpio")
	t.Setenv("SOURCE_DATE_EPOCH", testrepo.ImageEpoch)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dir := artifactDir(t)
	for _, sub := range []string{"layers", "images"} {
		if out, err := exec.CommandContext(ctx, "cp", "-a", filepath.Join("..", sub), filepath.Join(dir, sub)).CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v: %s", sub, err, out)
		}
	}
	start := time.Now()
	m := newMirror(ctx, t, dir)
	t.Logf("upstream stand-ins for %d packages in %d repositories, %d keys, built and signed in %s; hosts: %s",
		len(m.up.Names), len(m.up.Repos), len(m.keys), time.Since(start).Round(time.Second), strings.Join(m.hosts, " "))

	lab := newLab(ctx, t, "realrepo", "10.83.0.1/24")
	m.serve(t, lab.Name, lab.Addr.Addr().String())
	run := newNSRunner(ctx, t, dir, lab.Name, lab.Addr.Addr().String(), m)

	for _, img := range []string{"master", "compute"} {
		run.ok(t, "lock", "images/"+img+".toml")
		run.ok(t, "build", "images/"+img+".toml", "--version", "1", "--cache", "cache")
		checkImage(ctx, t, filepath.Join(dir, "out", img, "1"), nil, nil)
	}
	lock, err := resolve.Read(filepath.Join(dir, "images", "compute.lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkLockSources(t, lock)

	t.Run("the mirror dropped every package: vault and Koji, byte-identical", func(t *testing.T) {
		m.setGone(droppedPrefixes(lock)...)
		defer m.setGone()
		m.resetAsked()
		run.ok(t, "build", "images/compute.toml", "--version", "1", "--cache", "cache-vault", "--out", filepath.Join(dir, "out-vault"))
		sameFiles(t, filepath.Join(dir, "out", "compute", "1"), filepath.Join(dir, "out-vault", "compute", "1"))
		for _, want := range []string{"dl.rockylinux.org/vault/rocky/9.8/BaseOS/", "kojipkgs.fedoraproject.org/packages/"} {
			if !m.wasAsked(want) {
				t.Errorf("no package came from %s", want)
			}
		}
	})
	t.Run("mirror and archives gone: the package archive CI published", func(t *testing.T) {
		gone := droppedPrefixes(lock)
		for _, p := range lock.Packages() {
			if p.Archive != "" {
				gone = append(gone, strings.TrimPrefix(p.Archive, "https://"))
			}
		}
		m.setGone(gone...)
		defer m.setGone()
		if err := os.RemoveAll(filepath.Join(dir, "cache", "rpms")); err != nil {
			t.Fatal(err)
		}
		archive := filepath.Join(dir, "cache-vault", "rpms", "sha256") // the packages of build 2, by sha256
		run.ok(t, "build", "images/compute.toml", "--version", "1", "--cache", "cache", "--out", filepath.Join(dir, "out-archive"), "--package-archive", archive)
		sameFiles(t, filepath.Join(dir, "out", "compute", "1"), filepath.Join(dir, "out-archive", "compute", "1"))
	})
	t.Run("a package signed with another key is refused", func(t *testing.T) {
		repo := m.up.Repos["baseos"]
		rpm := m.rpmOf(t, "baseos", "tar-")
		orig, err := os.ReadFile(rpm)
		if err != nil {
			t.Fatal(err)
		}
		defer m.restore(ctx, t, repo, rpm, orig)
		if err := testrepo.Resign(ctx, repo, rpm, func(f []string) error { return m.kr.Sign(ctx, otherKey, f...) }); err != nil {
			t.Fatal(err)
		}
		msg := run.fails(t, "lock", "images/compute.toml")
		wantMsg(t, msg, m.keyLine(t, "base", "baseos"), `repo "baseos": package tar-`, "is not signed by the key at https://dl.rockylinux.org/pub/rocky/RPM-GPG-KEY-Rocky-9")
	})
	t.Run("a key URL serving the wrong key is refused", func(t *testing.T) {
		keyURL := m.keyURL(t, "openhpc")
		m.setKey(keyURL, m.otherPub)
		defer m.setKey(keyURL, m.keys[keyURL])
		msg := run.fails(t, "lock", "images/compute.toml")
		// The first OpenHPC package dnf meets is the slurm layer's (slurm-ohpc, a stand-in with an
		// arch and OpenHPC's release) or lmod-easybuild's: any -ohpc one.
		wantMsg(t, msg, m.keyLine(t, "openhpc", "openhpc"), `repo "openhpc": package `, "ohpc", " is not signed by the key at "+keyURL)
	})
	t.Run("a key URL that is gone is refused", func(t *testing.T) {
		keyURL := m.keyURL(t, "epel")
		m.setGone(strings.TrimPrefix(keyURL, "https://"))
		defer m.setGone()
		msg := run.fails(t, "lock", "images/compute.toml")
		wantMsg(t, msg, m.keyLine(t, "epel", "epel"), `repo "epel": its key could not be fetched from `+keyURL)
	})
}

// otherKey signs what no repository's key verifies.
const otherKey = "Someone Else <other@test.invalid>"

// checkLockSources: every package comes from a real repository URL, and those of Rocky and
// EPEL record where they last (the vault of the pinned minor, Koji's signed copy).
func checkLockSources(t *testing.T, l *resolve.LockFile) {
	t.Helper()
	if l.ReleaseVer != "9.8" {
		t.Errorf("lock releasever %q, want the pinned minor 9.8", l.ReleaseVer)
	}
	for _, r := range l.Repos {
		if !strings.HasPrefix(r.BaseURL, "https://") {
			t.Errorf("repo %s locked at %s, want its real https URL", r.ID, r.BaseURL)
		}
	}
	want := map[string]string{
		"baseos": "https://dl.rockylinux.org/vault/rocky/9.8/BaseOS/x86_64/os/Packages/",
		"epel":   "https://kojipkgs.fedoraproject.org/packages/",
	}
	seen := map[string]bool{}
	for _, p := range l.Packages() {
		prefix, lasting := want[p.Repo]
		switch {
		case lasting && !strings.HasPrefix(p.Archive, prefix):
			t.Errorf("%s (%s): archive %q, want one under %s", p.Name, p.Repo, p.Archive, prefix)
		case p.Repo == "epel" && !strings.Contains(p.Archive, "/data/signed/3228467c/"+p.Arch+"/"):
			t.Errorf("%s: archive %q is not Koji's copy signed with the EPEL 9 key", p.Name, p.Archive)
		case (p.Repo == "cuda-rhel9-x86_64" || strings.HasPrefix(p.Repo, "openhpc")) && p.Archive != "":
			t.Errorf("%s (%s): archive %q, want none (the repository keeps old packages)", p.Name, p.Repo, p.Archive)
		}
		seen[p.Repo] = true
	}
	for _, id := range []string{"baseos", "appstream", "epel", "cuda-rhel9-x86_64", "openhpc"} {
		if !seen[id] {
			t.Errorf("no package locked from %s", id)
		}
	}
}

// droppedPrefixes are host + path of the baseurl of every repo whose packages record an archive
// (Rocky's, whose minor moved to the vault; EPEL, which kept only newer builds): serving none of
// them is those mirrors having dropped every locked package. NVIDIA and OpenHPC keep theirs.
func droppedPrefixes(l *resolve.LockFile) []string {
	archived := map[string]bool{}
	for _, p := range l.Packages() {
		archived[p.Repo] = archived[p.Repo] || p.Archive != ""
	}
	var out []string
	for _, r := range l.Repos {
		if archived[r.ID] {
			out = append(out, strings.TrimPrefix(r.BaseURL, "https://"))
		}
	}
	return out
}

func wantMsg(t *testing.T, msg string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("error lacks %q:\n%s", p, msg)
		}
	}
}

// mirror is the stand-in for every host the layers name: one HTTPS server that routes by
// host and path.
type mirror struct {
	dir      string
	kr       *testrepo.Keyring
	up       testrepo.Upstream
	repos    []spec.Repo       // every repo of both images, variables filled in
	keys     map[string][]byte // gpgkey URL -> the public key served there
	uids     map[string]string // gpgkey URL -> the signing key's uid
	otherPub []byte
	hosts    []string
	trees    map[string]string // "host/path/" -> directory served under it
	files    map[string]string // "host/path" -> file (Koji's layout)
	ca       []byte            // PEM
	cert     tls.Certificate

	mu     sync.Mutex
	gone   []string          // "host/path" prefixes answered 404
	served map[string][]byte // gpgkey URL -> key served now
	asked  []string
}

func newMirror(ctx context.Context, t *testing.T, dir string) *mirror {
	t.Helper()
	m := &mirror{dir: dir, keys: map[string][]byte{}, uids: map[string]string{}, served: map[string][]byte{},
		trees: map[string]string{}, files: map[string]string{}}
	images := []string{filepath.Join(dir, "images", "master.toml"), filepath.Join(dir, "images", "compute.toml")}
	m.repos = planRepos(t, dir, images)
	kr, err := testrepo.NewKeyring(filepath.Join(dir, "gnupg"))
	if err != nil {
		t.Fatal(err)
	}
	m.kr = kr
	for i, r := range m.repos {
		if _, ok := m.keys[r.GPGKey]; ok {
			continue
		}
		uid := fmt.Sprintf("Test key %d for %s <key%d@test.invalid>", i, r.ID, i)
		pub, err := kr.AddKey(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		m.keys[r.GPGKey], m.uids[r.GPGKey], m.served[r.GPGKey] = pub, uid, pub
	}
	if m.otherPub, err = kr.AddKey(ctx, otherKey); err != nil {
		t.Fatal(err)
	}
	m.up, err = testrepo.BuildUpstream(ctx, filepath.Join(dir, "upstream"), filepath.Join(dir, "layers"), images,
		func(id string, rpms []string) error { return kr.Sign(ctx, m.uids[m.repoByID(id).GPGKey], rpms...) })
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range m.repos {
		m.route(ctx, t, r)
	}
	slices.Sort(m.hosts)
	m.hosts = slices.Compact(m.hosts)
	m.ca, m.cert = testCA(t, m.hosts)
	return m
}

// planRepos resolves the images (no site file) and returns their repos, each id once.
func planRepos(t *testing.T, dir string, images []string) []spec.Repo {
	t.Helper()
	var repos []spec.Repo
	for _, path := range images {
		img, err := spec.LoadImage(path)
		if err != nil {
			t.Fatal(err)
		}
		p, err := spec.Resolve(img, filepath.Join(dir, "layers"), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Repos() {
			if !r.GPGCheck || r.GPGKey == "" {
				t.Fatalf("repo %s does not check signatures: shipped layers must", r.ID)
			}
			if !slices.ContainsFunc(repos, func(x spec.Repo) bool { return x.ID == r.ID }) {
				repos = append(repos, r)
			}
		}
	}
	return repos
}

func (m *mirror) repoByID(id string) spec.Repo {
	for _, r := range m.repos {
		if r.ID == id {
			return r
		}
	}
	return spec.Repo{}
}

// route serves repo r's stand-in at its baseurl, its key at its gpgkey URL, and its packages
// where its archive template says they last: a template ending in {location} is a copy of the
// tree (Rocky's vault), any other is filled in per package from its header (Koji's layout).
func (m *mirror) route(ctx context.Context, t *testing.T, r spec.Repo) {
	t.Helper()
	tree := m.up.Repos[r.ID]
	m.trees[hostPath(t, r.BaseURL, &m.hosts)] = tree
	hostPath(t, r.GPGKey, &m.hosts)
	if r.Archive == "" {
		return
	}
	if base, ok := strings.CutSuffix(r.Archive, "{location}"); ok {
		m.trees[hostPath(t, base, &m.hosts)] = tree
		return
	}
	rpms, err := testrepo.RPMs(tree)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rpms {
		out, err := exec.CommandContext(ctx, "rpm", "-qp", "--nosignature", "--qf", "%{ARCH}\t%{SOURCERPM}", f).Output()
		if err != nil {
			t.Fatalf("rpm -qp %s: %v", f, err)
		}
		arch, src, _ := strings.Cut(string(out), "\t")
		nvr := strings.TrimSuffix(src, ".src.rpm")
		rel := nvr[strings.LastIndexByte(nvr, '-')+1:]
		nv := nvr[:strings.LastIndexByte(nvr, '-')]
		ver := nv[strings.LastIndexByte(nv, '-')+1:]
		name := nv[:strings.LastIndexByte(nv, '-')]
		u, err := spec.FillArchive(r.Archive, map[string]string{"source_name": name, "source_version": ver, "source_release": rel,
			"arch": arch, "file": filepath.Base(f), "location": "unused"})
		if err != nil {
			t.Fatal(err)
		}
		m.files[hostPath(t, u, &m.hosts)] = f
	}
}

// hostPath is raw's "host/path", adding its host to hosts.
func hostPath(t *testing.T, raw string, hosts *[]string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" {
		t.Fatalf("%q: want an https URL (%v)", raw, err)
	}
	*hosts = append(*hosts, u.Hostname())
	return u.Hostname() + u.Path
}

func (m *mirror) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	hp := host + r.URL.Path
	m.mu.Lock()
	m.asked = append(m.asked, hp)
	gone := slices.ContainsFunc(m.gone, func(p string) bool { return strings.HasPrefix(hp, p) })
	key, isKey := m.served["https://"+hp]
	m.mu.Unlock()
	if gone {
		http.NotFound(w, r)
		return
	}
	if isKey {
		w.Write(key)
		return
	}
	if f, ok := m.files[hp]; ok {
		http.ServeFile(w, r, f)
		return
	}
	for prefix, tree := range m.trees {
		if rest, ok := strings.CutPrefix(hp, prefix); ok && !strings.Contains(rest, "..") {
			http.ServeFile(w, r, filepath.Join(tree, filepath.FromSlash(rest)))
			return
		}
	}
	http.NotFound(w, r)
}

// serve listens on addr:443 inside the namespace ns until the test ends.
func (m *mirror) serve(t *testing.T, ns, addr string) {
	t.Helper()
	var ln net.Listener
	err := vlab.InNetns(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(addr, "443"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: m, TLSConfig: &tls.Config{Certificates: []tls.Certificate{m.cert}}, ReadHeaderTimeout: 30 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("mirror: %v", err)
		}
	})
}

func (m *mirror) setGone(prefixes ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gone = prefixes
}

func (m *mirror) setKey(keyURL string, pub []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.served[keyURL] = pub
}

func (m *mirror) resetAsked() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.asked = nil
}

func (m *mirror) wasAsked(prefix string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.ContainsFunc(m.asked, func(p string) bool { return strings.HasPrefix(p, prefix) && strings.HasSuffix(p, ".rpm") })
}

func (m *mirror) keyURL(t *testing.T, repo string) string {
	t.Helper()
	r := m.repoByID(repo)
	if r.GPGKey == "" {
		t.Fatalf("no repo %s", repo)
	}
	return r.GPGKey
}

// keyLine is "layers/<layer>.toml:N: repos[i].gpgkey" for repo in the test's copy of layer.
func (m *mirror) keyLine(t *testing.T, layer, repo string) string {
	t.Helper()
	img, err := spec.LoadImage(filepath.Join(m.dir, "images", "compute.toml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := spec.Resolve(img, filepath.Join(m.dir, "layers"), nil)
	if err != nil {
		t.Fatal(err)
	}
	where := strings.TrimPrefix(p.RepoKeyWhere(repo), m.dir+"/") // imgbuild runs in m.dir
	if !strings.Contains(where, "layers/"+layer+".toml:") || !strings.HasSuffix(where, ".gpgkey") {
		t.Fatalf("repo %s's key is at %q, want a line of layers/%s.toml", repo, where, layer)
	}
	return where
}

// rpmOf is the file of the package whose name starts with prefix in repo.
func (m *mirror) rpmOf(t *testing.T, repo, prefix string) string {
	t.Helper()
	rpms, err := testrepo.RPMs(m.up.Repos[repo])
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rpms {
		if strings.HasPrefix(filepath.Base(f), prefix) {
			return f
		}
	}
	t.Fatalf("no %s* in repo %s", prefix, repo)
	return ""
}

// restore puts the original bytes of rpm back and rewrites its repository's metadata.
func (m *mirror) restore(ctx context.Context, t *testing.T, repo, rpm string, orig []byte) {
	t.Helper()
	if err := os.WriteFile(rpm, orig, 0o644); err != nil {
		t.Error(err)
	}
	if err := testrepo.Createrepo(ctx, repo); err != nil {
		t.Error(err)
	}
}

// testCA makes a CA and a server certificate for hosts signed by it; the CA's PEM is what the
// test's processes trust, in their mount namespace only.
func testCA(t *testing.T, hosts []string) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "labcluster test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: hosts[0]}, DNSNames: hosts,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// nsRunner runs the imgbuild binary inside the lab's network namespace and a mount namespace of
// its own where /etc/hosts sends every mirror host to the lab's server and the CA bundle is the
// test CA: the real names resolve and verify there, and nowhere else.
type nsRunner struct {
	ctx                 context.Context
	bin, dir, ns        string
	hostsFile, caBundle string
}

func newNSRunner(ctx context.Context, t *testing.T, dir, ns, addr string, m *mirror) *nsRunner {
	t.Helper()
	r := &nsRunner{ctx: ctx, bin: filepath.Join(dir, "imgbuild"), dir: dir, ns: ns,
		hostsFile: filepath.Join(dir, "hosts"), caBundle: filepath.Join(dir, "ca.pem")}
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", r.bin, "../cmd/imgbuild").CombinedOutput(); err != nil {
		t.Fatalf("build imgbuild: %v\n%s", err, out)
	}
	hosts := "127.0.0.1 localhost\n" + addr + " " + strings.Join(m.hosts, " ") + "\n"
	if err := os.WriteFile(r.hostsFile, []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.caBundle, m.ca, 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// trustStore is the file Debian's libcurl (dnf) and Go's crypto/x509 read the trusted CAs from.
const trustStore = "/etc/ssl/certs/ca-certificates.crt"

func (r *nsRunner) command(args ...string) *exec.Cmd {
	script := `mount --bind "$1" /etc/hosts && mount --bind "$2" ` + trustStore + ` && shift 2 && exec "$@"`
	full := append([]string{"netns", "exec", r.ns, "unshare", "--mount", "--propagation", "private",
		"sh", "-c", script, "sh", r.hostsFile, r.caBundle, r.bin}, args...)
	full = append(full, "--log-format", "json", "-q")
	if !slices.Contains(args, "--out") {
		full = append(full, "--out", filepath.Join(r.dir, "out"))
	}
	if !slices.Contains(args, "--cache") {
		full = append(full, "--cache", filepath.Join(r.dir, "cache"))
	}
	cmd := exec.CommandContext(r.ctx, "ip", full...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+testrepo.ImageEpoch)
	return cmd
}

func (r *nsRunner) ok(t *testing.T, args ...string) {
	t.Helper()
	start := time.Now()
	out, err := r.command(args...).CombinedOutput()
	if err != nil {
		t.Fatalf("imgbuild %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("imgbuild %s: %s", strings.Join(args, " "), time.Since(start).Round(100*time.Millisecond))
}

// fails runs imgbuild, wants it to fail, and returns what it said.
func (r *nsRunner) fails(t *testing.T, args ...string) string {
	t.Helper()
	out, err := r.command(args...).CombinedOutput()
	if err == nil {
		t.Fatalf("imgbuild %s succeeded, want a refusal:\n%s", strings.Join(args, " "), out)
	}
	t.Logf("imgbuild %s refused: %s", strings.Join(args, " "), lastLine(string(out)))
	return string(out)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
