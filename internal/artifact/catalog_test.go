package artifact

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// catalogWith publishes the versions (created one hour apart, in order) and
// returns a catalog over them with its log hook.
func catalogWith(t *testing.T, versions ...string) (*Catalog, string, *logtest.Hook) {
	t.Helper()
	images := t.TempDir()
	for i, v := range versions {
		m := testManifest("compute", v)
		m.Created = created.Add(time.Duration(i) * time.Hour)
		writeImage(t, images, m)
	}
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	return NewCatalog(images, log), images, hook
}

func countLogs(hook *logtest.Hook, msg string) int {
	n := 0
	for _, e := range hook.AllEntries() {
		if e.Message == msg {
			n++
		}
	}
	return n
}

func TestCatalogResolve(t *testing.T) {
	tests := []struct {
		name     string
		versions []string                          // created in this order
		breakV   func(t *testing.T, images string) // damages versions before Resolve
		pin      string
		want     string // version; "" means an ErrNotFound error
	}{
		{"newest by created", []string{"1", "3", "2"}, nil, "", "2"},
		{"pinned", []string{"1", "2", "3"}, nil, "2", "2"},
		{"pinned missing", []string{"1"}, nil, "9", ""},
		{"pinned bad name", []string{"1"}, nil, "../1", ""},
		{"broken newest skipped", []string{"1", "2"}, func(t *testing.T, images string) {
			overwriteInPlace(t, filepath.Join(images, "compute", "2", "vmlinuz"), "tampered!!!!\n")
		}, "", "1"},
		{"broken manifest skipped", []string{"1", "2"}, func(t *testing.T, images string) {
			writeManifestBytes(t, filepath.Join(images, "compute", "2"), "{")
		}, "", "1"},
		{"missing file skipped", []string{"1", "2"}, func(t *testing.T, images string) {
			os.Remove(filepath.Join(images, "compute", "2", "rootfs.squashfs"))
		}, "", "1"},
		{"pinned broken refused", []string{"1", "2"}, func(t *testing.T, images string) {
			os.Truncate(filepath.Join(images, "compute", "1", "vmlinuz"), 0)
		}, "1", ""},
		{"all broken", []string{"1"}, func(t *testing.T, images string) {
			os.Truncate(filepath.Join(images, "compute", "1", "vmlinuz"), 0)
		}, "", ""},
		{"temp dirs ignored", []string{"1"}, func(t *testing.T, images string) {
			os.Mkdir(filepath.Join(images, "compute", ".2.tmp-123"), 0o755)
		}, "", "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, images, _ := catalogWith(t, tt.versions...)
			if tt.breakV != nil {
				tt.breakV(t, images)
			}
			img, err := c.Resolve("compute", tt.pin)
			if tt.want == "" {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("Resolve() = %v, %v; want ErrNotFound", img, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(): %v", err)
			}
			if img.Manifest.Version != tt.want {
				t.Fatalf("Resolve() = version %s, want %s", img.Manifest.Version, tt.want)
			}
		})
	}
}

func TestCatalogNaturalOrder(t *testing.T) {
	images := t.TempDir()
	for _, v := range []string{"2026.11.21-9", "2026.11.21-10", "2026.11.21-2"} {
		writeImage(t, images, testManifest("compute", v)) // same Created
	}
	c := NewCatalog(images, logrus.New())
	img, err := c.Resolve("compute", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Manifest.Version; got != "2026.11.21-10" {
		t.Fatalf("Resolve() = %s, want 2026.11.21-10", got)
	}
}

func TestCatalogUnknownImage(t *testing.T) {
	c, _, _ := catalogWith(t, "1")
	for _, name := range []string{"master", "..", "compute/1", ""} {
		t.Run(name, func(t *testing.T) {
			if _, err := c.Resolve(name, ""); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Resolve(%q) = %v, want ErrNotFound", name, err)
			}
		})
	}
}

// TestCatalogRefusesSymlinkedDirs: an image or version directory that is a symlink is not
// served, and is named once in the log; before, an image directory was followed out of the images
// directory and a version directory skipped without a word.
func TestCatalogRefusesSymlinkedDirs(t *testing.T) {
	const msg = "image directory refused: it is a symlink, and bootd serves only directories inside the images directory (move the image there, or publish it with imgbuild --out)"
	_, elsewhere, _ := catalogWith(t, "1", "2") // a valid compute/1 and compute/2, outside
	t.Run("image directory", func(t *testing.T) {
		c, images, hook := catalogWith(t)
		if err := os.Symlink(filepath.Join(elsewhere, "compute"), filepath.Join(images, "compute")); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if img, err := c.Resolve("compute", ""); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Resolve = %v, %v; want ErrNotFound", img, err)
			}
		}
		if _, _, err := c.Open("compute", "1", "vmlinuz"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Open through the link: %v, want ErrNotFound", err)
		}
		if n := countLogs(hook, msg); n != 1 {
			t.Errorf("logged %d times, want once", n)
		}
	})
	t.Run("version directory", func(t *testing.T) {
		c, images, hook := catalogWith(t, "1")
		if err := os.Symlink(filepath.Join(elsewhere, "compute", "2"), filepath.Join(images, "compute", "2")); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if img, err := c.Resolve("compute", ""); err != nil || img.Manifest.Version != "1" {
				t.Fatalf("Resolve = %v, %v; want version 1", img, err)
			}
		}
		if _, err := c.Resolve("compute", "2"); !errors.Is(err, ErrNotFound) {
			t.Errorf("pinned to the link: %v, want ErrNotFound", err)
		}
		if n := countLogs(hook, msg); n != 1 {
			t.Errorf("logged %d times, want once", n)
		}
		for _, e := range hook.AllEntries() {
			if e.Message == msg && e.Data["target"] != filepath.Join(elsewhere, "compute", "2") {
				t.Errorf("the line names target %v", e.Data["target"])
			}
		}
	})
}

func TestCatalogCachesAndLogsOnce(t *testing.T) {
	c, images, hook := catalogWith(t, "1", "2")
	overwriteInPlace(t, filepath.Join(images, "compute", "2", "initramfs.img"), "bad initrd!!\n")
	for range 3 {
		if _, err := c.Resolve("compute", ""); err != nil {
			t.Fatal(err)
		}
	}
	if n := countLogs(hook, "image version refused"); n != 1 {
		t.Fatalf("broken version logged %d times, want once", n)
	}
	if n := countLogs(hook, "image version verified"); n != 1 {
		t.Fatalf("good version verified %d times, want once (cached)", n)
	}
	line := hook.AllEntries()[0]
	if dir := line.Data["dir"]; dir != filepath.Join(images, "compute", "2") {
		t.Errorf("log names dir %v, want version 2", dir)
	}
	if p, _ := line.Data["problem"].(string); !strings.Contains(p, "file initramfs.img") {
		t.Errorf("log problem %q does not name the file", p)
	}
}

func TestCatalogDetectsTamperAfterVerification(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, path string)
	}{
		{"replaced file", func(t *testing.T, p string) { replaceFile(t, p, "evil kernel\n!") }},
		{"rewritten in place", func(t *testing.T, p string) { overwriteInPlace(t, p, "evil kernel\n!") }},
		{"removed", func(t *testing.T, p string) { os.Remove(p) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, images, hook := catalogWith(t, "1", "2")
			img, err := c.Resolve("compute", "")
			if err != nil || img.Manifest.Version != "2" {
				t.Fatalf("Resolve() = %v, %v; want version 2", img, err)
			}
			tt.tamper(t, filepath.Join(images, "compute", "2", "vmlinuz"))
			if _, _, err := c.Open("compute", "2", "vmlinuz"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Open of tampered file = %v, want ErrNotFound", err)
			}
			img, err = c.Resolve("compute", "")
			if err != nil || img.Manifest.Version != "1" {
				t.Fatalf("Resolve() after tampering = %v, %v; want version 1", img, err)
			}
			if n := countLogs(hook, "image version refused"); n != 1 {
				t.Fatalf("tampered version logged %d times, want once", n)
			}
		})
	}
}

func TestCatalogOpen(t *testing.T) {
	c, images, _ := catalogWith(t, "1", "2")
	// Files that exist but are not listed must not be served.
	os.WriteFile(filepath.Join(images, "compute", "2", "extra.img"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(images, "secret"), []byte("x"), 0o644)
	tests := []struct {
		name, image, version, file string
		want                       string // content; "" means ErrNotFound
	}{
		{"kernel", "compute", "2", "vmlinuz", bootFiles["vmlinuz"]},
		{"older version", "compute", "1", "rootfs.squashfs", bootFiles["rootfs.squashfs"]},
		{"unlisted file", "compute", "2", "extra.img", ""},
		{"manifest", "compute", "2", ManifestFile, ""},
		{"dot-dot file", "compute", "2", "../../secret", ""},
		{"dot-dot version", "compute", "..", "secret", ""},
		{"slash in file", "compute", "2", "x/vmlinuz", ""},
		{"absolute file", "compute", "2", "/etc/passwd", ""},
		{"unknown version", "compute", "7", "vmlinuz", ""},
		{"unknown image", "master", "2", "vmlinuz", ""},
		{"empty version", "compute", "", "vmlinuz", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, img, err := c.Open(tt.image, tt.version, tt.file)
			if tt.want == "" {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("Open() = %v, want ErrNotFound", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(): %v", err)
			}
			defer f.Close()
			data, _ := io.ReadAll(f)
			if string(data) != tt.want || img.Manifest.Version != tt.version {
				t.Fatalf("Open() = %q of version %s, want %q", data, img.Manifest.Version, tt.want)
			}
		})
	}
	if n := len(c.entries); n != 2 {
		t.Errorf("catalog caches %d entries, want 2: made-up versions must not be cached", n)
	}
}

func TestCatalogConcurrent(t *testing.T) {
	c, _, hook := catalogWith(t, "1", "2")
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if _, err := c.Resolve("compute", ""); err != nil {
				t.Error(err)
			}
			f, _, err := c.Open("compute", "2", "vmlinuz")
			if err != nil {
				t.Error(err)
				return
			}
			f.Close()
		})
	}
	wg.Wait()
	if n := countLogs(hook, "image version verified"); n != 1 {
		t.Fatalf("verified %d times under concurrency, want once", n)
	}
}

// TestCatalogVerifiedJSONDuration: under bootd's JSON log format, the time a verification took
// is a duration string like every other duration field ("16ms"), not integer nanoseconds.
func TestCatalogVerifiedJSONDuration(t *testing.T) {
	images := t.TempDir()
	writeImage(t, images, testManifest("compute", "1"))
	var buf bytes.Buffer
	log := logrus.New()
	log.SetOutput(&buf)
	log.SetFormatter(&logrus.JSONFormatter{})
	if _, err := NewCatalog(images, log).Resolve("compute", ""); err != nil {
		t.Fatal(err)
	}
	var line struct {
		Msg      string `json:"msg"`
		Duration any    `json:"duration"`
	}
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if line.Msg == "image version verified" {
			break
		}
	}
	s, ok := line.Duration.(string)
	if line.Msg != "image version verified" || !ok {
		t.Fatalf("log %s: want an \"image version verified\" line with a duration string", buf.String())
	}
	if d, err := time.ParseDuration(s); err != nil || d.Round(time.Millisecond) != d {
		t.Errorf("duration %q is not a duration in whole milliseconds (%v)", s, err)
	}
}
