package pack

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labcluster/gpucluster/internal/child"
)

// SquashOptions tune Squashfs; the zero value plus Epoch is what builds use.
type SquashOptions struct {
	// Epoch is SOURCE_DATE_EPOCH: the superblock's creation time, and the
	// bound every file time in the tree must respect (rootfs.Normalize).
	Epoch int64
	// Compression is a mksquashfs compressor; "" picks zstd when mksquashfs
	// has it, else xz. The Rocky 9 kernel mounts gzip, xz and zstd, not lz4.
	Compression string
	// Level is passed as -Xcompression-level (gzip 1-9, zstd 1-22; xz has
	// none); 0 means DefaultZstdLevel for zstd and mksquashfs's default for
	// the others.
	Level int
	// Processors is mksquashfs's thread count; 0 means all CPUs. With
	// -reproducible the output does not depend on it (tested: 1, 2 and 4
	// threads give the same bytes).
	Processors int
	// Progress, when set, receives mksquashfs's progress ("421/4210 10%")
	// each time the percentage changes.
	Progress func(string)
}

// DefaultZstdLevel is zstd's level when SquashOptions.Level is 0. On a
// 1 GB tree of Debian binaries and libraries (2 threads), level 9 gave
// 332 MB in 9-11 s, mksquashfs's own default 15 gave 308 MB in 127 s, 19
// gave 305 MB in 143 s and xz 277 MB in 169 s (and xz reads back 5x slower
// than zstd): 9 keeps rebuilds of multi-GB CUDA images in minutes for 8%
// more bytes. Publishing can ask for more with Level.
const DefaultZstdLevel = 9

// Squashfs packs tree into out (replaced if it exists) with mksquashfs,
// reproducibly: the same tree content gives the same bytes, whatever the
// inode numbers, the directory read order or the thread count.
//
// File times are stored as they are in the tree, not forced to the epoch:
// rootfs.Normalize clamps only times newer than the epoch, so packaged files
// keep their rpm mtimes and the *.pyc files built against them stay valid.
// Squashfs refuses a tree with a time newer than Epoch (not normalized)
// rather than writing an image that cannot be reproduced.
//
// Numeric owners, modes, extended attributes (SELinux labels, file
// capabilities such as ping's), hard links, symlinks and device nodes are
// kept. -all-root is never used: munge and slurm need their fixed uids.
// mksquashfs stores extended attributes in the order listxattr returns them,
// which rootfs.Normalize makes canonical.
func Squashfs(ctx context.Context, tree, out string, opts SquashOptions) error {
	args, err := opts.args(tree, out)
	if err != nil {
		return fmt.Errorf("squashfs %s: %w", tree, err)
	}
	if err := checkTimes(tree, opts.Epoch); err != nil {
		return fmt.Errorf("squashfs %s: %w", tree, err)
	}
	if err := run(ctx, args, opts.Progress); err != nil {
		os.Remove(out)
		return fmt.Errorf("squashfs %s: %w", tree, err)
	}
	return nil
}

func (o SquashOptions) args(tree, out string) ([]string, error) {
	if o.Epoch < 0 || o.Epoch > math.MaxUint32 {
		return nil, fmt.Errorf("epoch %d out of squashfs's 32-bit range", o.Epoch)
	}
	comp, err := compressor(o.Compression)
	if err != nil {
		return nil, err
	}
	procs := o.Processors
	if procs == 0 {
		procs = runtime.NumCPU()
	}
	if procs < 0 || o.Level < 0 {
		return nil, fmt.Errorf("processors %d, level %d: want >= 0", o.Processors, o.Level)
	}
	args := []string{notOption(tree), notOption(out),
		"-noappend", "-no-recovery", "-exit-on-error", "-quiet",
		"-reproducible", "-mkfs-time", strconv.FormatInt(o.Epoch, 10),
		"-xattrs", "-comp", comp, "-processors", strconv.Itoa(procs),
	}
	level := o.Level
	if level == 0 && comp == "zstd" {
		level = DefaultZstdLevel
	}
	if level != 0 {
		args = append(args, "-Xcompression-level", strconv.Itoa(level))
	}
	if o.Progress == nil {
		args = append(args, "-no-progress")
	}
	return args, nil
}

// notOption keeps a relative path such as "-x" from reading as an option.
func notOption(p string) string {
	if strings.HasPrefix(p, "-") {
		return "./" + p
	}
	return p
}

// compressor validates name against what this mksquashfs was built with.
func compressor(name string) (string, error) {
	have, err := compressors()
	if err != nil {
		return "", err
	}
	if name == "" {
		name = "xz"
		if slices.Contains(have, "zstd") {
			name = "zstd"
		}
	}
	if !slices.Contains(have, name) {
		return "", fmt.Errorf("mksquashfs has no %q compressor (it has %s)", name, strings.Join(have, ", "))
	}
	return name, nil
}

// compressors lists mksquashfs's compressors from its help text (the tool
// has no machine-readable way to ask), once per process.
var compressors = sync.OnceValues(func() ([]string, error) {
	text, _ := exec.Command("mksquashfs", "-help").CombinedOutput() // exits 1 after printing help
	_, list, _ := strings.Cut(string(text), "Compressors available:\n")
	var have []string
	for line := range strings.Lines(list) {
		fields := strings.Fields(line)
		if !strings.HasPrefix(line, "\t\t\t\t") || len(fields) == 0 {
			break
		}
		have = append(have, fields[0])
	}
	if len(have) == 0 {
		return nil, errors.New("mksquashfs not found or lists no compressors (apt-get install squashfs-tools)")
	}
	return have, nil
})

// checkTimes returns an error naming the first path (in walk order) with an
// mtime after epoch: mksquashfs stores mtimes as found, so an unclamped tree
// would not pack reproducibly.
func checkTimes(tree string, epoch int64) error {
	limit := time.Unix(epoch, 0)
	return filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.ModTime().After(limit) {
			return fmt.Errorf("%s: mtime %s is after the epoch %d (run rootfs.Normalize first)", p, fi.ModTime().UTC().Format(time.RFC3339), epoch)
		}
		return nil
	})
}

// run runs mksquashfs. SOURCE_DATE_EPOCH is dropped from its environment:
// mksquashfs 4.5 refuses it next to -mkfs-time, and it would also force every
// file time to the epoch.
func run(ctx context.Context, args []string, progress func(string)) error {
	cmd := child.Command(ctx, "mksquashfs", args...) // dies with imgbuild: it writes into the build tree
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "SOURCE_DATE_EPOCH=")
	})
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("mksquashfs: %w", err)
	}
	output, last := readProgress(stdout, progress)
	if err := cmd.Wait(); err != nil {
		msg := strings.TrimSpace(stderr.String() + "\n" + output)
		return fmt.Errorf("mksquashfs: %w: %s", err, shorten(msg, 5))
	}
	// mksquashfs draws its bar from a thread of its own, and for a small tree it may finish
	// before drawing even once (seen under load): the caller still hears that packing ended.
	if progress != nil && last != "100%" {
		progress("done 100%")
	}
	return nil
}

// readProgress reads mksquashfs's stdout to the end. Its progress bar is
// "\r[====/   ] 421/4210  10%"; each new percentage goes to progress. Lines
// that are not progress are returned, for error messages, with the last percentage.
func readProgress(r io.Reader, progress func(string)) (output, last string) {
	sc := bufio.NewScanner(r)
	sc.Split(splitCRLF)
	var other strings.Builder
	for sc.Scan() {
		line := sc.Text()
		count, ok := progressOf(line)
		if !ok {
			other.WriteString(line + "\n")
			continue
		}
		if pct := count[strings.LastIndexByte(count, ' ')+1:]; progress != nil && pct != last {
			last = pct
			progress(count)
		}
	}
	return other.String(), last
}

// progressOf extracts "421/4210 10%" from a progress bar line.
func progressOf(line string) (string, bool) {
	i := strings.LastIndexByte(line, ']')
	if !strings.HasPrefix(line, "[") || i < 0 || !strings.HasSuffix(line, "%") {
		return "", false
	}
	return strings.Join(strings.Fields(line[i+1:]), " "), true
}

func splitCRLF(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// shorten keeps the first and last lines of a tool's message: option errors
// come first (then the help text), fatal errors last.
func shorten(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 2*n {
		lines = slices.Concat(lines[:n], []string{"..."}, lines[len(lines)-n:])
	}
	return strings.Join(lines, "\n")
}

// exitDetail adds a failed command's stderr to its error.
func exitDetail(err error) error {
	var exit *exec.ExitError
	if errors.As(err, &exit) && len(exit.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, shorten(strings.TrimSpace(string(exit.Stderr)), 5))
	}
	return err
}
