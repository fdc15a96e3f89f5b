package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cost is what one step cost: its wall time, the bytes its process tree wrote (write_bytes of
// /proc/<pid>/io: what it sent towards the disk, files deleted before writeback included), the
// peak RSS of the largest process in the tree, and the peak disk the cache held meanwhile.
type cost struct {
	Wall     time.Duration
	Written  int64
	PeakRSS  int64 // bytes
	PeakDisk int64 // bytes; 0 where not sampled
}

// stepEnv names the environment variable that makes this program run one step (the JSON of a
// step) instead of the benchmark: each measured step is a child process, so its tree's I/O and
// peak RSS are its own.
const stepEnv = "BENCH_IMGBUILD_STEP"

// runStep runs st in a child process of this program and measures it. out receives the child's
// standard output (a step's JSON result). The child's writes reach this process's
// /proc/self/io when it is reaped (the kernel adds a reaped child's counts to its parent's),
// which is why nothing else may write from here while it runs.
func (b *bench) runStep(ctx context.Context, st step, out any) (cost, error) {
	self, err := os.Executable()
	if err != nil {
		return cost{}, err
	}
	js, err := json.Marshal(st)
	if err != nil {
		return cost{}, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), stepEnv+"="+string(js))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	sampler := b.disk.sample(st.Cache)
	before, err := writeBytes()
	if err != nil {
		return cost{}, err
	}
	start := time.Now()
	err = cmd.Run()
	c := cost{Wall: time.Since(start), PeakDisk: sampler.stop()}
	after, rerr := writeBytes()
	if err != nil {
		return c, fmt.Errorf("step %s: %v: %s", st.Kind, err, tailText(stderr.String(), 20))
	}
	if rerr != nil {
		return c, rerr
	}
	c.Written = after - before
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		c.PeakRSS = ru.Maxrss << 10
	}
	if out != nil {
		if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
			return c, fmt.Errorf("step %s: its result: %w", st.Kind, err)
		}
	}
	return c, nil
}

// writeBytes is this process's write_bytes, its reaped children's included.
func writeBytes() (int64, error) {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "write_bytes: "); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/self/io: no write_bytes")
}

func tailText(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// workFS is the benchmark's own ext4 file system (a loop device over a sparse file), so that
// the disk the cache holds can be sampled cheaply and exactly (statfs), with nothing else on it
// but the stand-in repository and the versions, and it is ext4 without reflink whatever the
// host has. Without one (size 0), the work directory is a plain directory and peak disk is not
// measured.
type workFS struct {
	dir, image, loop string
}

func mountWorkFS(ctx context.Context, dir string, gib int) (*workFS, error) {
	w := &workFS{dir: dir}
	if gib == 0 {
		return w, nil
	}
	w.image = dir + ".img"
	f, err := os.Create(w.image)
	if err == nil {
		err = f.Truncate(int64(gib) << 30)
		f.Close()
	}
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", "--direct-io=on", w.image).Output()
	if err != nil {
		os.Remove(w.image)
		return nil, fmt.Errorf("losetup: %w", err)
	}
	w.loop = strings.TrimSpace(string(out))
	for _, args := range [][]string{
		{"mkfs.ext4", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard", w.loop},
		{"mount", "-o", "discard", w.loop, dir},
	} {
		if msg, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			w.close()
			return nil, fmt.Errorf("%s: %v: %s", args[0], err, msg)
		}
	}
	return w, nil
}

// close unmounts and detaches what mountWorkFS made, and removes the image file. A step killed
// by Ctrl-C may leave processes that still hold the file system for a moment: the unmount is
// tried for 20 s, then made lazy (the kernel finishes it when they are gone, and a detached loop
// device then goes with it).
func (w *workFS) close() {
	if w.loop == "" {
		return
	}
	unmounted := false
	for range 20 {
		if unmounted = exec.Command("umount", w.dir).Run() == nil; unmounted {
			break
		}
		time.Sleep(time.Second)
	}
	if !unmounted {
		_ = exec.Command("umount", "--lazy", w.dir).Run()
	}
	_ = exec.Command("losetup", "--detach", w.loop).Run()
	os.Remove(w.image)
}

// used is how much of the work file system is in use.
func (w *workFS) used() int64 {
	var st syscall.Statfs_t
	if w.loop == "" || syscall.Statfs(w.dir, &st) != nil {
		return 0
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// diskSampler follows the work file system's use while a step runs.
type diskSampler struct {
	w     *workFS
	base  int64 // use at the start that is not the cache's
	peak  int64
	done  chan struct{}
	wg    sync.WaitGroup
	valid bool
}

// sample starts following the disk: the cache's peak is the file system's peak less what the
// rest (repository, earlier trees outside cache) held at the start. cache may be "".
func (w *workFS) sample(cache string) *diskSampler {
	s := &diskSampler{w: w, done: make(chan struct{})}
	if w.loop == "" || cache == "" {
		return s
	}
	s.valid = true
	s.base = w.used() - duBytes(cache)
	s.peak = w.used()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				s.peak = max(s.peak, w.used())
			}
		}
	}()
	return s
}

func (s *diskSampler) stop() int64 {
	if !s.valid {
		return 0
	}
	close(s.done)
	s.wg.Wait()
	return max(s.peak, s.w.used()) - s.base
}

// duBytes is the disk space the files under dir take (blocks, hard links once).
func duBytes(dir string) int64 {
	var n int64
	seen := map[uint64]bool{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || seen[st.Ino] {
			return nil
		}
		if st.Nlink > 1 {
			seen[st.Ino] = true
		}
		n += st.Blocks * 512
		return nil
	})
	return n
}
