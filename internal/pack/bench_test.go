package pack

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// benchTreeSize is the amount of file data the benchmark packs.
const benchTreeSize = 200 << 20

// BenchmarkPackVsMksquashfs packs one generated ~200 MiB tree with
// Squashfs and with plain "mksquashfs tree out -noappend" (gzip, all
// processors), and reports both throughputs, their ratio and the sizes.
// Run: go test -run '^$' -bench PackVsMksquashfs -benchtime 1x ./internal/pack
func BenchmarkPackVsMksquashfs(b *testing.B) {
	tree, size := benchTree(b)
	out := b.TempDir()
	var packTime, baseTime time.Duration
	var packSize, baseSize int64
	for b.Loop() {
		packTime += timed(b, func() error {
			return Squashfs(context.Background(), tree, filepath.Join(out, "pack.sqfs"), SquashOptions{Epoch: testEpoch})
		})
		baseTime += timed(b, func() error {
			cmd := exec.Command("mksquashfs", tree, filepath.Join(out, "base.sqfs"), "-noappend")
			cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
			return cmd.Run()
		})
		packSize, baseSize = fileSize(b, filepath.Join(out, "pack.sqfs")), fileSize(b, filepath.Join(out, "base.sqfs"))
	}
	mb := float64(size) / 1e6 * float64(b.N)
	b.ReportMetric(mb/packTime.Seconds(), "pack-MB/s")
	b.ReportMetric(mb/baseTime.Seconds(), "mksquashfs-MB/s")
	b.ReportMetric(baseTime.Seconds()/packTime.Seconds(), "speed-ratio")
	b.ReportMetric(float64(size)/(1<<20), "tree-MiB")
	b.ReportMetric(float64(packSize)/(1<<20), "pack-MiB")
	b.ReportMetric(float64(baseSize)/(1<<20), "mksquashfs-MiB")
	b.ReportMetric(float64(packSize)/float64(baseSize), "size-ratio")
}

func timed(b *testing.B, f func() error) time.Duration {
	start := time.Now()
	if err := f(); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

func fileSize(b *testing.B, p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		b.Fatal(err)
	}
	return fi.Size()
}

// benchTree writes a fixed pseudo-random tree shaped like an OS image: many
// small text files (configs, scripts, docs), mid-sized binaries with
// repetitive structure, a few large incompressible blobs (compressed
// archives, firmware) and some zero-filled files, in 40 directories.
func benchTree(b *testing.B) (string, int64) {
	b.Helper()
	tree := b.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	corpus := textCorpus(rng, 4<<20)
	var total int64
	for i := 0; total < benchTreeSize; i++ {
		data := benchFile(rng, corpus, i)
		dir := filepath.Join(tree, fmt.Sprintf("usr/share/d%02d", i%40))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
		total += int64(len(data))
	}
	setTimes(b, tree, fileTime)
	return tree, total
}

// benchFile returns the i-th file. Of every 64 files, 40 are text (1-64
// KiB), 16 binary-like (64 KiB-1 MiB), 6 zero-filled and 2 random (256 KiB
// -1.25 MiB): by bytes about 73% binary, 11% text, 12% already compressed.
func benchFile(rng *rand.Rand, corpus []byte, i int) []byte {
	switch k := i % 64; {
	case k < 40:
		n := 1<<10 + rng.IntN(63<<10)
		off := rng.IntN(len(corpus) - n)
		return corpus[off : off+n]
	case k < 56:
		return binaryLike(rng, 64<<10+rng.IntN(960<<10))
	case k < 62:
		return make([]byte, 4<<10+rng.IntN(124<<10))
	default:
		return randomBytes(rng, 256<<10+rng.IntN(1<<20))
	}
}

func randomBytes(rng *rand.Rand, n int) []byte {
	data := make([]byte, n+8)
	for j := 0; j < n; j += 8 {
		binary.LittleEndian.PutUint64(data[j:], rng.Uint64())
	}
	return data[:n]
}

func textCorpus(rng *rand.Rand, n int) []byte {
	words := []string{"the", "system", "config", "enable", "service", "path", "=", "/usr/lib", "#", "node",
		"slurm", "munge", "if", "then", "fi", "return", "error", "value", "{", "}", "\n", "\n", "  ", "int", "char"}
	buf := make([]byte, 0, n)
	for len(buf) < n {
		buf = append(buf, words[rng.IntN(len(words))]...)
		buf = append(buf, ' ')
	}
	return buf[:n]
}

// binaryLike strings together snippets from a shared dictionary (the
// idioms compiled code repeats) with short random runs (addresses,
// constants) in between.
func binaryLike(rng *rand.Rand, n int) []byte {
	buf := make([]byte, 0, n+64)
	for len(buf) < n {
		if rng.IntN(10) < 7 {
			buf = append(buf, snippets[rng.IntN(len(snippets))]...)
		} else {
			buf = append(buf, randomBytes(rng, 4+rng.IntN(12))...)
		}
	}
	return buf[:n]
}

var snippets = func() [][]byte {
	rng := rand.New(rand.NewPCG(3, 4))
	s := make([][]byte, 512)
	for i := range s {
		s[i] = randomBytes(rng, 8+rng.IntN(56))
	}
	return s
}()
