package testrepo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// SourceDateEpoch is the build time of every stand-in and the timestamp of
// the repository metadata: a fixed value, so rebuilding gives the same bytes.
const SourceDateEpoch = 1700000000

// Build builds pkgs with rpmbuild into dir/Packages/<first letter>/ (the
// layout of Rocky's mirrors, so locations relative to the baseurl are not
// bare file names) and (re)creates the repository metadata of dir with
// createrepo_c. RPMs already in dir stay in the repository.
func Build(ctx context.Context, dir string, pkgs []Package) error {
	if err := buildRPMs(ctx, dir, pkgs); err != nil {
		return err
	}
	return Createrepo(ctx, dir)
}

// buildRPMs is Build without the metadata.
func buildRPMs(ctx context.Context, dir string, pkgs []Package) error {
	top, err := os.MkdirTemp("", "testrepo-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(top)
	specs, err := stageAll(top, pkgs)
	if err != nil {
		return err
	}
	if len(specs) > 0 {
		if err := rpmbuild(ctx, top, specs, smallPayload); err != nil {
			return err
		}
	}
	return publish(filepath.Join(top, "RPMS"), dir)
}

// stageAll writes each package's staging tree and spec; it returns the spec
// paths in the order of pkgs.
func stageAll(top string, pkgs []Package) ([]string, error) {
	seen := map[string]bool{}
	var specs []string
	for _, p := range pkgs {
		p = p.withDefaults()
		if err := p.check(); err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("package %s: given twice", p.Name)
		}
		seen[p.Name] = true
		stage := filepath.Join(top, "STAGE", p.Name)
		if err := p.stage(stage); err != nil {
			return nil, fmt.Errorf("package %s: %w", p.Name, err)
		}
		spec := filepath.Join(top, "SPECS", p.Name+".spec")
		if err := writeFile(spec, p.spec(stage), 0o644); err != nil {
			return nil, err
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// stage creates the package's tree under dir.
func (p Package) stage(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for _, d := range sortedKeys(p.Dirs) {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	for _, f := range sortedKeys(p.Files) {
		if err := writeFile(filepath.Join(dir, f), p.Files[f], p.fileMode(f).Perm()); err != nil {
			return err
		}
	}
	if err := p.stageBinaries(dir); err != nil {
		return err
	}
	if p.Payload != nil {
		if _, err := p.Payload.Generate(filepath.Join(dir, p.PayloadDir)); err != nil {
			return fmt.Errorf("payload: %w", err)
		}
	}
	for _, l := range sortedKeys(p.Symlinks) {
		dst := filepath.Join(dir, l)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(l), err)
		}
		if err := os.Symlink(p.Symlinks[l], dst); err != nil {
			return fmt.Errorf("symlink %s: %w", l, err)
		}
	}
	return nil
}

// stageBinaries copies host files in; a host file named twice is copied
// once and hard-linked, so rpm stores its content once.
func (p Package) stageBinaries(dir string) error {
	first := map[string]string{}
	for _, b := range sortedKeys(p.Binaries) {
		src, dst := p.Binaries[b], filepath.Join(dir, b)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(b), err)
		}
		if prev, ok := first[src]; ok {
			if err := os.Link(prev, dst); err != nil {
				return fmt.Errorf("link %s: %w", b, err)
			}
			continue
		}
		if err := copyFile(src, dst); err != nil {
			return err
		}
		first[src] = dst
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("host file: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return fmt.Errorf("create %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}

// The packages' payload compressors: gzip for the small stand-ins (their bytes are pinned by
// tests), zstd for a gigabytes payload, as Rocky's own packages are (w19.zstdio there; level 6
// here keeps building a CUDA-sized stand-in to a minute or two).
const (
	smallPayload = "w9.gzdio"
	largePayload = "w6.zstdio"
)

// PayloadRPM builds p, a package with a Payload, into cacheDir once and returns the RPM's path:
// generating and compressing gigabytes takes minutes, so later calls with the same package,
// payload (Payload.Key: its size, seed and the host corpus) and compressor reuse the file.
func PayloadRPM(ctx context.Context, cacheDir string, p Package) (string, error) {
	if p.Payload == nil {
		return "", fmt.Errorf("package %s has no payload", p.Name)
	}
	pk, err := p.Payload.Key()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n", p.withDefaults().spec("STAGE"), pk, largePayload)
	path := filepath.Join(cacheDir, fmt.Sprintf("%s-%x.rpm", p.Name, h.Sum(nil)[:8]))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}
	top, err := os.MkdirTemp(cacheDir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(top)
	specs, err := stageAll(top, []Package{p})
	if err != nil {
		return "", err
	}
	if err := rpmbuild(ctx, top, specs, largePayload); err != nil {
		return "", err
	}
	// The cache entry appears whole or not at all.
	return path, os.Rename(filepath.Join(top, "RPMS", p.withDefaults().FileName()), path)
}

// rpmbuild builds all specs in one run. The definitions make the output
// depend only on the specs: build time and file mtimes from
// SOURCE_DATE_EPOCH, a fixed build host, an explicit payload compressor
// (Debian's and Rocky's defaults differ) and flat output names.
func rpmbuild(ctx context.Context, top string, specs []string, payload string) error {
	defs := []string{
		"_topdir " + top,
		"_tmppath " + filepath.Join(top, "tmp"),
		"_rpmdir " + filepath.Join(top, "RPMS"),
		"_rpmfilename %{NAME}-%{VERSION}-%{RELEASE}.%{ARCH}.rpm",
		"_buildhost localhost",
		"_binary_payload " + payload,
		"use_source_date_epoch_as_buildtime 1",
		"clamp_mtime_to_source_date_epoch 1",
	}
	if err := os.MkdirAll(filepath.Join(top, "tmp"), 0o755); err != nil {
		return fmt.Errorf("create tmp: %w", err)
	}
	args := []string{"-bb", "--quiet"}
	for _, d := range defs {
		args = append(args, "--define", d)
	}
	cmd := exec.CommandContext(ctx, "rpmbuild", append(args, specs...)...)
	cmd.Env = []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + top, // no ~/.rpmmacros of whoever runs the tests
		"LANG=C", "LC_ALL=C", "TZ=UTC",
		"SOURCE_DATE_EPOCH=" + strconv.Itoa(SourceDateEpoch),
	}
	return runCmd(cmd)
}

// publish moves the built RPMs to dir/Packages/<first letter>/.
func publish(rpms, dir string) error {
	var files []string
	err := filepath.WalkDir(rpms, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".rpm") {
			files = append(files, p)
		}
		return err
	})
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("find built packages: %w", err)
	}
	for _, f := range files {
		base := filepath.Base(f)
		sub := filepath.Join(dir, "Packages", strings.ToLower(base[:1]))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", sub, err)
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("read %s: %w", f, err)
		}
		dst := filepath.Join(sub, base)
		if err := writeFile(dst, string(data), 0o644); err != nil {
			return err
		}
		// createrepo_c records the file's mtime in primary.xml.
		t := time.Unix(SourceDateEpoch, 0)
		if err := os.Chtimes(dst, t, t); err != nil {
			return fmt.Errorf("set time of %s: %w", dst, err)
		}
	}
	return nil
}

// Createrepo (re)writes dir's repository metadata. The revision and
// timestamps are SourceDateEpoch, and there are no sqlite databases (dnf
// reads the XML), so the same packages give the same metadata.
func Createrepo(ctx context.Context, dir string) error {
	rev := strconv.Itoa(SourceDateEpoch)
	cmd := exec.CommandContext(ctx, "createrepo_c", "--quiet", "--no-database",
		"--revision", rev, "--set-timestamp-to-revision", "--workers", "1", dir)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C", "LC_ALL=C", "TZ=UTC"}
	return runCmd(cmd)
}

func runCmd(cmd *exec.Cmd) error {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w:\n%s", filepath.Base(cmd.Path), err, tail(out.String(), 20))
	}
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func writeFile(path, content string, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// WriteFile's mode is filtered by the umask; the staged mode is what
	// cp -a carries into the buildroot.
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
