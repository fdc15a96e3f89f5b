package testrepo

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Payload is a CUDA-sized stand-in payload: Bytes of files under one directory, in thousands of
// files, that compress about as NVIDIA's CUDA toolkit does (2-3x with zstd). It is made of:
//
//   - shared libraries, static archives and executables: segments of the host's own ELF files
//     (corpus), each output file stamped so that no two are alike (squashfs and rpm would store
//     duplicates once);
//   - headers and HTML documentation: C-like text from a seeded vocabulary;
//   - some incompressible data, as CUDA's fat binaries and compressed blobs are.
//
// The same Bytes, Seed and host corpus give the same files, byte for byte.
type Payload struct {
	Bytes int64
	Seed  uint64
}

// payloadFormat names the generator: change it when the files it makes change.
const payloadFormat = "payload/1"

// Shares of the payload's bytes by kind, chosen so that the whole compresses about 2.5x with
// zstd 9 in squashfs's 128 KiB blocks (BENCHMARKS.md gives the measured ratio).
const (
	textShare   = 0.05
	randomShare = 0.11
)

// corpusDirs hold the host ELF files the binaries are cut from; corpusMax bounds how much of
// them is read (into memory, once per process: corpus). A variable so a test can read less.
var (
	corpusDirs = []string{"/usr/lib/x86_64-linux-gnu", "/usr/bin", "/usr/sbin", "/usr/libexec"}
	corpusMax  = 256 << 20
	corpus     = sync.OnceValues(loadCorpus)
)

type fileKind int

const (
	kindELF fileKind = iota
	kindText
	kindRandom
)

// payloadFile is one file of the plan: its path under the payload directory, kind and size.
type payloadFile struct {
	path string
	kind fileKind
	size int64
}

// Generate writes the payload under dir (created) and returns how many files it wrote.
func (p Payload) Generate(dir string) (int, error) {
	corpus, err := corpus()
	if err != nil {
		return 0, err
	}
	plan := p.plan()
	for i, f := range plan {
		if err := p.write(filepath.Join(dir, f.path), i, f, corpus); err != nil {
			return i, err
		}
	}
	return len(plan), p.symlinks(dir, plan)
}

// Key identifies what Generate makes on this host: the format, size, seed and a digest of the
// corpus. A cache of generated payloads (or of packages carrying them) is keyed by it.
func (p Payload) Key() (string, error) {
	corpus, err := corpus()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(corpus)
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%d\n%d\n%x\n", payloadFormat, p.Bytes, p.Seed, sum)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// plan lays out the files: counts grow with the size (thousands at CUDA's), sizes drawn
// log-uniformly so a few libraries are hundreds of MiB, as cuBLAS's and cuFFT's are.
func (p Payload) plan() []payloadFile {
	r := rand.New(rand.NewPCG(p.Seed, 1))
	mib := p.Bytes >> 20
	text := int64(float64(p.Bytes) * textShare)
	random := int64(float64(p.Bytes) * randomShare)
	elf := p.Bytes - text - random
	var files []payloadFile
	files = append(files, spread(r, kindELF, elf, clamp(mib/16, 8, 400), 1000)...)
	files = append(files, spread(r, kindText, text, clamp(mib, 20, 3000), 50)...)
	files = append(files, spread(r, kindRandom, random, clamp(mib/64, 2, 60), 20)...)
	names := newNamer(r)
	for i := range files {
		files[i].path = names.path(files[i].kind, i)
	}
	return files
}

// spread splits total bytes into n files whose sizes span a factor of about ratio.
func spread(r *rand.Rand, kind fileKind, total, n int64, ratio float64) []payloadFile {
	weights := make([]float64, n)
	var sum float64
	for i := range weights {
		weights[i] = math.Pow(ratio, r.Float64())
		sum += weights[i]
	}
	files := make([]payloadFile, n)
	var used int64
	for i, w := range weights {
		size := int64(float64(total) * w / sum)
		if i == len(weights)-1 {
			size = total - used
		}
		files[i] = payloadFile{kind: kind, size: max(size, 64)}
		used += size
	}
	return files
}

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }

// namer makes CUDA-like paths: libraries and tools under lib64/ and bin/, headers in nested
// include/ directories, documentation under doc/html/.
type namer struct {
	r    *rand.Rand
	seen map[string]bool
}

func newNamer(r *rand.Rand) *namer { return &namer{r: r, seen: map[string]bool{}} }

var syllables = []string{"cu", "bl", "as", "fft", "rand", "sparse", "solver", "nv", "rtc", "pti",
	"jit", "link", "vm", "dnn", "tx", "npp", "ial", "ig", "sm", "ptx", "mem", "graph", "tensor",
	"core", "math", "stream", "event", "dev", "host", "warp", "thrust", "cub", "atomic", "ctx"}

func (n *namer) word(parts int) string {
	var b strings.Builder
	for range parts {
		b.WriteString(syllables[n.r.IntN(len(syllables))])
	}
	return b.String()
}

func (n *namer) path(kind fileKind, i int) string {
	for {
		var p string
		switch kind {
		case kindELF:
			p = n.binaryPath(i)
		case kindText:
			p = n.textPath()
		default:
			p = fmt.Sprintf("%s/%s.fatbin", []string{"lib64", "nvvm/libdevice", "extras/CUPTI/lib64"}[n.r.IntN(3)], n.word(3))
		}
		if !n.seen[p] {
			n.seen[p] = true
			return p
		}
	}
}

func (n *namer) binaryPath(i int) string {
	switch i % 4 {
	case 0, 1:
		return fmt.Sprintf("lib64/lib%s.so.12.6.%d", n.word(2), 20+n.r.IntN(60))
	case 2:
		return fmt.Sprintf("lib64/lib%s_static.a", n.word(2))
	}
	return fmt.Sprintf("%s/%s", []string{"bin", "nvvm/bin", "extras/CUPTI/samples"}[n.r.IntN(3)], n.word(2))
}

func (n *namer) textPath() string {
	if n.r.IntN(5) == 0 {
		return fmt.Sprintf("doc/html/%s/%s.html", n.word(1), n.word(3))
	}
	dirs := []string{"include", "include/crt", "include/thrust/detail", "include/cub/block",
		"include/cuda/std/detail", "include/cooperative_groups/details", "nvvm/include"}
	return fmt.Sprintf("%s/%s/%s.h", dirs[n.r.IntN(len(dirs))], n.word(1), n.word(3))
}

// write writes one planned file: 0755 for ELF files under bin/, 0644 otherwise.
func (p Payload) write(path string, i int, f payloadFile, corpus []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	mode := fs.FileMode(0o644)
	if f.kind == kindELF && strings.Contains(path, "bin/") {
		mode = 0o755
	}
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(out, 1<<20)
	r := rand.New(rand.NewPCG(p.Seed, uint64(i)+2))
	// The stamp makes every file unique.
	fmt.Fprintf(w, "standin payload %d file %d\n", p.Seed, i)
	left := f.size - int64(len(fmt.Sprintf("standin payload %d file %d\n", p.Seed, i)))
	switch f.kind {
	case kindELF:
		err = writeELF(w, r, corpus, left)
	case kindText:
		err = writeText(w, r, left)
	default:
		err = writeRandom(w, r, left)
	}
	if err == nil {
		err = w.Flush()
	}
	return errors.Join(err, out.Close(), os.Chmod(path, mode))
}

// writeELF writes n bytes cut from the corpus in segments of 256 KiB to 4 MiB at seeded offsets.
func writeELF(w io.Writer, r *rand.Rand, corpus []byte, n int64) error {
	for n > 0 {
		seg := min(n, int64(256<<10+r.IntN(4<<20-256<<10)), int64(len(corpus)))
		off := r.Int64N(int64(len(corpus)) - seg + 1)
		if _, err := w.Write(corpus[off : off+seg]); err != nil {
			return err
		}
		n -= seg
	}
	return nil
}

var cWords = []string{"__host__", "__device__", "inline", "static", "const", "int", "float",
	"double", "void", "unsigned", "size_t", "cudaError_t", "return", "template", "typename",
	"struct", "namespace", "if", "else", "for", "auto", "constexpr", "noexcept", "nullptr"}

// writeText writes n bytes of C-like declarations with identifiers from the namer's syllables.
func writeText(w io.Writer, r *rand.Rand, n int64) error {
	var line strings.Builder
	for n > 0 {
		line.Reset()
		for k := 2 + r.IntN(8); k > 0; k-- {
			if r.IntN(3) == 0 {
				line.WriteString(cWords[r.IntN(len(cWords))])
			} else {
				line.WriteString(syllables[r.IntN(len(syllables))])
				line.WriteString(syllables[r.IntN(len(syllables))])
			}
			line.WriteString([]string{" ", " ", "(", ", ", "->", " = ", "; "}[r.IntN(7)])
		}
		line.WriteString(";\n")
		s := line.String()
		if int64(len(s)) > n {
			s = s[:n]
		}
		if _, err := io.WriteString(w, s); err != nil {
			return err
		}
		n -= int64(len(s))
	}
	return nil
}

func writeRandom(w io.Writer, r *rand.Rand, n int64) error {
	buf := make([]byte, 64<<10)
	for n > 0 {
		k := min(n, int64(len(buf)))
		for i := 0; i+8 <= int(k); i += 8 {
			binary.LittleEndian.PutUint64(buf[i:], r.Uint64())
		}
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// symlinks adds the soname links a CUDA library has: libX.so -> libX.so.12 -> libX.so.12.6.N.
func (p Payload) symlinks(dir string, plan []payloadFile) error {
	for _, f := range plan {
		base := filepath.Base(f.path)
		stem, _, ok := strings.Cut(base, ".so.12.6.")
		if !ok {
			continue
		}
		d := filepath.Join(dir, filepath.Dir(f.path))
		for link, target := range map[string]string{stem + ".so.12": base, stem + ".so": stem + ".so.12"} {
			if err := os.Symlink(target, filepath.Join(d, link)); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		}
	}
	return nil
}

// loadCorpus reads the host's ELF files from corpusDirs, in path order, up to corpusMax bytes.
func loadCorpus() ([]byte, error) {
	var paths []string
	for _, d := range corpusDirs {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				paths = append(paths, p)
			}
			return nil
		})
	}
	slices.Sort(paths)
	corpus := make([]byte, 0, corpusMax)
	for _, p := range paths {
		if len(corpus) >= corpusMax {
			break
		}
		data, err := os.ReadFile(p)
		if err != nil || len(data) < 4096 || string(data[:4]) != "\x7fELF" {
			continue
		}
		corpus = append(corpus, data[:min(len(data), corpusMax-len(corpus))]...)
	}
	if len(corpus) < min(16<<20, corpusMax) {
		return nil, fmt.Errorf("payload corpus: only %d bytes of ELF files under %s", len(corpus), strings.Join(corpusDirs, ", "))
	}
	return corpus, nil
}
