package testrepo

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPayloadReproducible: the same size and seed give the same files byte for byte, another
// seed other files, and the plan holds what it says (its size, its kinds, unique files).
func TestPayloadReproducible(t *testing.T) {
	corpusMax = 16 << 20 // the first (and only) load in this process: keep the test quick
	p := Payload{Bytes: 6 << 20, Seed: 7}
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	for _, gen := range []struct {
		dir string
		p   Payload
	}{{a, p}, {b, p}, {c, Payload{Bytes: p.Bytes, Seed: 8}}} {
		if _, err := gen.p.Generate(gen.dir); err != nil {
			t.Fatal(err)
		}
	}
	ha, hb, hc := payloadHashes(t, a), payloadHashes(t, b), payloadHashes(t, c)
	if len(ha) != len(hb) {
		t.Fatalf("%d and %d entries from the same seed", len(ha), len(hb))
	}
	for name, sum := range ha {
		if hb[name] != sum {
			t.Errorf("%s differs between two runs of the same seed", name)
		}
	}
	same := 0
	for name, sum := range ha {
		if hc[name] == sum {
			same++
		}
	}
	if same == len(ha) {
		t.Error("another seed gave the same payload")
	}
	var total int64
	contents := map[string]bool{}
	kinds := map[fileKind]int{}
	for _, f := range p.plan() {
		total += f.size
		kinds[f.kind]++
	}
	for _, sum := range ha {
		if !strings.HasPrefix(sum, "link:") {
			if contents[sum] {
				t.Errorf("two files with the same content (%s): squashfs and rpm would store it once", sum)
			}
			contents[sum] = true
		}
	}
	if total != p.Bytes || kinds[kindELF] == 0 || kinds[kindText] == 0 || kinds[kindRandom] == 0 {
		t.Errorf("plan of %d bytes with kinds %v, want %d bytes of all three kinds", total, kinds, p.Bytes)
	}
	if ka, err := p.Key(); err != nil {
		t.Fatal(err)
	} else if kb, _ := (Payload{Bytes: p.Bytes, Seed: 8}).Key(); ka == kb {
		t.Error("two seeds have one key")
	}
}

// payloadHashes maps each entry under dir to its content's sha256 (symlinks: their target).
func payloadHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			out[rel] = "link:" + target
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = fmt.Sprintf("%x", sha256.Sum256(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
