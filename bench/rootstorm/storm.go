package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/labcluster/gpucluster/internal/castr"
	"github.com/labcluster/gpucluster/internal/sha256hex"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// nodeStats is what bootd-fetch --stats writes (rootfetch.Stats).
type nodeStats struct {
	Size, FromSeeds, FromBootd, FromPeers int64
	PeersDropped                          []string
	PeersSetAside                         int
	Whole                                 bool
}

// fetchRun is one storm of bootd-fetch nodes.
type fetchRun struct {
	n         int
	took      time.Duration // start -> the last node holds the checked image
	appliance int64         // bytes bootd's link sent
	nodes     []nodeStats
}

// baseRun is one single-server storm of whole-file downloads, stopped after a while.
type baseRun struct {
	server string
	ran    time.Duration
	bytes  int64 // the server's link
	rate   float64
}

// extrapolated is the time the storm would have taken for every node to receive the whole file
// at the rate it sustained.
func (b baseRun) extrapolated(n int, size int64) time.Duration {
	return time.Duration(float64(n) * float64(size) / b.rate * float64(time.Second))
}

type stormResult struct {
	n            int
	peers        fetchRun
	bootd, nginx baseRun
}

func (l *lab) stormSize(ctx context.Context, im *images, n int) (stormResult, error) {
	r := stormResult{n: n}
	var err error
	progress("N = %d: nodes fetch by chunks, from bootd and each other", n)
	if r.peers, err = l.fetchStorm(ctx, n, im.v1, nil, filepath.Join(l.o.work, fmt.Sprintf("v1-n%d.img", n))); err != nil {
		return r, err
	}
	progress("N = %d: all hold the image after %s; single-server storms next (%d s each)", n, r.peers.took.Round(time.Second), l.o.baselineSecs)
	url := fmt.Sprintf("http://%s/images/compute/1/rootfs.squashfs", l.lab.Addr.Addr())
	if r.bootd, err = l.wholeStorm(ctx, n, "bootd", url); err != nil {
		return r, err
	}
	if err := l.startNginx(ctx); err != nil {
		return r, err
	}
	defer l.stopNginx()
	url = fmt.Sprintf("http://%s:8080/images/compute/1/rootfs.squashfs", l.lab.Addr.Addr())
	r.nginx, err = l.wholeStorm(ctx, n, "nginx", url)
	return r, err
}

// fetchStorm starts bootd-fetch on the first n nodes at once, as their initramfs would, with a
// fresh bootd, and waits until every one has the image checked.
func (l *lab) fetchStorm(ctx context.Context, n int, v version, seed *version, out string) (fetchRun, error) {
	run := fetchRun{n: n}
	if err := l.restartBootd(ctx); err != nil {
		return run, err
	}
	dir := filepath.Join(filepath.Dir(out), "nodes-"+filepath.Base(out))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return run, err
	}
	var args [][]string
	for i, nd := range l.nodes[:n] {
		cl, err := l.cmdline(ctx, nd)
		if err != nil {
			return run, err
		}
		f := filepath.Join(dir, nd.name+".cmdline")
		if err := os.WriteFile(f, []byte(cl+"\n"), 0o644); err != nil {
			return run, err
		}
		a := []string{"root", "--cmdline", f, "--output", out, "--shared-output", "--have", filepath.Join(dir, nd.name+".have"),
			"--port", peerPort, "--stats", filepath.Join(dir, nd.name+".json")}
		if seed != nil {
			a = append(a, "--seed", seed.file+":"+seed.index)
		}
		args = append(args, a)
		_ = i
	}
	limit := time.Duration(float64(v.size) / l.bytesPerSec() * 20 * float64(time.Second))
	sctx, cancel := context.WithTimeout(ctx, limit+5*time.Minute)
	defer cancel()
	before, err := l.applianceBytes(ctx)
	if err != nil {
		return run, err
	}
	fetch := filepath.Join(filepath.Dir(l.o.bootd), "bootd-fetch")
	start := time.Now()
	procs := make([]*vlab.Process, n)
	for i, nd := range l.nodes[:n] {
		if procs[i], err = nd.host.Start(sctx, filepath.Join(dir, nd.name+".log"), fetch, args[i]...); err != nil {
			return run, err
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	ends := make([]time.Duration, n)
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = procs[i].Wait(sctx)
			ends[i] = time.Since(start)
		}()
	}
	wg.Wait()
	after, _ := l.applianceBytes(ctx)
	l.killNodes(ctx)
	for i, err := range errs {
		if err != nil {
			return run, fmt.Errorf("%s: bootd-fetch: %v: %s", l.nodes[i].name, err, vlab.TailFile(procs[i].LogPath, 10))
		}
		run.took = max(run.took, ends[i])
	}
	run.appliance = after - before
	for _, nd := range l.nodes[:n] {
		b, err := os.ReadFile(filepath.Join(dir, nd.name+".json"))
		if err != nil {
			return run, err
		}
		var st nodeStats
		if err := json.Unmarshal(b, &st); err != nil {
			return run, err
		}
		run.nodes = append(run.nodes, st)
	}
	if sum, err := sha256hex.File(out); err != nil || sum != v.sha {
		return run, fmt.Errorf("the image the nodes wrote has sha256 %s (%v), want %s", sum, err, v.sha)
	}
	return run, nil
}

// wholeStorm has the first n nodes download the whole file from url with curl at once (what
// dracut's livenet does without bootd-fetch), for baselineSecs, and measures what the server's
// link sent meanwhile.
func (l *lab) wholeStorm(ctx context.Context, n int, server, url string) (baseRun, error) {
	r := baseRun{server: server}
	if server == "bootd" {
		if err := l.restartBootd(ctx); err != nil {
			return r, err
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	before, err := l.applianceBytes(ctx)
	if err != nil {
		return r, err
	}
	start := time.Now()
	for _, nd := range l.nodes[:n] {
		if _, err := nd.host.Start(sctx, filepath.Join(l.o.work, "curl-"+server+"-"+nd.name+".log"), "curl", "-sS", "-o", "/dev/null", url); err != nil {
			return r, err
		}
	}
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(time.Duration(l.o.baselineSecs) * time.Second):
	}
	after, err := l.applianceBytes(ctx)
	r.ran = time.Since(start)
	cancel()
	l.killNodes(ctx)
	if err != nil {
		return r, err
	}
	r.bytes = after - before
	r.rate = float64(r.bytes) / r.ran.Seconds()
	if r.rate <= 0 {
		return r, fmt.Errorf("%s sent nothing in %s", server, r.ran)
	}
	return r, nil
}

func (l *lab) bytesPerSec() float64 { return float64(l.o.rateMbit) * 1e6 / 8 }

// updateResult is the nodes moving to v2, each seeded by the v1 it holds.
type updateResult struct {
	run     fetchRun
	changed int64
}

func (l *lab) update(ctx context.Context, im *images, n int) (updateResult, error) {
	u := updateResult{changed: im.changed}
	if err := publish(im.dir, im.stage2, "2"); err != nil {
		return u, err
	}
	held := filepath.Join(l.o.work, fmt.Sprintf("v1-n%d.img", n))
	seed := im.v1
	seed.file = held
	seed.index = filepath.Join(im.dir, "compute", "1", castr.IndexFile)
	var err error
	u.run, err = l.fetchStorm(ctx, n, im.v2, &seed, filepath.Join(l.o.work, "v2.img"))
	return u, err
}

// startNginx runs nginx on the bridge's address, port 8080, over the same images directory.
func (l *lab) startNginx(ctx context.Context) error {
	run := filepath.Join(l.o.work, "nginx")
	for _, d := range []string{"logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(run, d), 0o755); err != nil {
			return err
		}
	}
	p := func(name string) string { return filepath.Join(run, name) }
	conf := `daemon off;
master_process on;
worker_processes auto;
user root root;
pid ` + p("nginx.pid") + `;
error_log ` + p("logs/error.log") + `;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ` + p("tmp/body") + `;
  proxy_temp_path ` + p("tmp/proxy") + `;
  fastcgi_temp_path ` + p("tmp/fastcgi") + `;
  uwsgi_temp_path ` + p("tmp/uwsgi") + `;
  scgi_temp_path ` + p("tmp/scgi") + `;
  default_type application/octet-stream;
  sendfile on;
  tcp_nopush on;
  server {
    listen ` + l.lab.Addr.Addr().String() + `:8080;
    root ` + l.o.work + `;
    location /images/ { }
  }
}
`
	if err := os.WriteFile(p("nginx.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	var err error
	if l.nginx, err = l.lab.Start(ctx, p("logs/nginx.out"), "nginx", "-c", p("nginx.conf"), "-e", p("logs/error.log")); err != nil {
		return err
	}
	url := fmt.Sprintf("http://%s:8080/images/compute/1/manifest.json", l.lab.Addr.Addr())
	for range 100 {
		if out, err := l.lab.Command(ctx, "curl", "-fsS", "-o", "/dev/null", url).CombinedOutput(); err == nil {
			return nil
		} else if l.nginx.Exited() {
			return fmt.Errorf("nginx: %s %s", out, vlab.TailFile(p("logs/error.log"), 5))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("nginx did not answer %s", url)
}

func (l *lab) stopNginx() {
	if l.nginx != nil {
		l.nginx.Kill()
		l.nginx = nil
	}
}
