package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/procstat"
	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// Addresses of the storm's lab: a /24 whose discovery pool holds 240 machines (bootd's reference
// pool holds 50), the master and three compute addresses parked at the top. dnsmasq gets the same
// pool and lease time.
const (
	poolStart = "10.80.0.10"
	poolEnd   = "10.80.0.249"
	leaseTime = "2m"
)

const bootdConfig = `# bootstorm: room for 200 machines waiting at once
[discovery]
pool_start = "` + poolStart + `"
pool_end = "` + poolEnd + `"
lease_time = "` + leaseTime + `"

[master]
address = "10.80.0.250"

[compute]
first_address = "10.80.0.251"
max_nodes = 3
`

// server is one side of the comparison, started fresh for every storm.
type server interface {
	Name() string
	Start(ctx context.Context) error
	// Leaders are the process group leaders whose groups are the server.
	Leaders() []int
	Stop()
}

// bootdServer is `bootd serve` on the lab's bridge: DHCP and HTTP in one process, TFTP in its
// worker process (same process group: the figures count both).
type bootdServer struct {
	lab  *vlab.Lab
	bin  string
	dir  string // holds images/ (shared) and state/ (new per storm)
	proc *vlab.Process
}

func (b *bootdServer) Name() string { return "bootd" }

func (b *bootdServer) Start(ctx context.Context) error {
	if err := os.RemoveAll(filepath.Join(b.dir, "state")); err != nil {
		return err
	}
	cfg := filepath.Join(b.dir, "bootd.toml")
	if err := os.WriteFile(cfg, []byte(bootdConfig), 0o644); err != nil {
		return err
	}
	bd, err := b.lab.StartBootd(ctx, b.bin, b.dir, "--config", cfg, "--ipxe-dir", vlab.IPXEDir)
	if bd != nil {
		b.proc = bd.Proc
	}
	return err
}

func (b *bootdServer) Leaders() []int { return []int{b.proc.Cmd.Process.Pid} }
func (b *bootdServer) Stop()          { stop(b.proc) }

// baselineServer is dnsmasq (DHCP + TFTP) and nginx (HTTP) on the lab's bridge, serving the same
// iPXE binary and the same image files.
type baselineServer struct {
	lab       *vlab.Lab
	dir       string // per-storm files of both daemons go under dir/run
	filesRoot string // nginx root: holds images/<name>/<version>/<file>
	ping      bool   // leave dnsmasq's ICMP check before an offer on
	again     bool   // the control: the baseline's second storm of a pair
	dnsmasq   *vlab.Process
	nginx     *vlab.Process
}

func (s *baselineServer) Name() string {
	if s.again {
		return "dnsmasq+nginx-again"
	}
	return "dnsmasq+nginx"
}

func (s *baselineServer) Start(ctx context.Context) error {
	run := filepath.Join(s.dir, "run")
	if err := os.RemoveAll(run); err != nil {
		return err
	}
	for _, d := range []string{"tmp", "logs"} {
		if err := os.MkdirAll(filepath.Join(run, d), 0o755); err != nil {
			return err
		}
	}
	var err error
	s.dnsmasq, err = s.lab.Start(ctx, filepath.Join(run, "logs", "dnsmasq.out"), "dnsmasq", s.dnsmasqArgs(run)...)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, 10*time.Second, s.dnsmasq, func() bool {
		b, _ := os.ReadFile(filepath.Join(run, "logs", "dnsmasq.log"))
		return strings.Contains(string(b), "TFTP root is")
	}); err != nil {
		return fmt.Errorf("dnsmasq did not start: %w: %s", err, vlab.TailFile(filepath.Join(run, "logs", "dnsmasq.out"), 10))
	}
	conf := filepath.Join(run, "nginx.conf")
	if err := os.WriteFile(conf, []byte(s.nginxConf(run)), 0o644); err != nil {
		return err
	}
	s.nginx, err = s.lab.Start(ctx, filepath.Join(run, "logs", "nginx.out"), "nginx",
		"-p", run, "-c", conf, "-e", filepath.Join(run, "logs", "error.log"))
	if err != nil {
		return err
	}
	labNS, err := vlab.OpenNetns(s.lab.Name)
	if err != nil {
		return err
	}
	defer labNS.Close()
	addr := net.JoinHostPort(s.lab.Addr.Addr().String(), "80")
	if err := waitFor(ctx, 10*time.Second, s.nginx, func() bool {
		return labNS.Do(func() error {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}) == nil
	}); err != nil {
		return fmt.Errorf("nginx did not start: %w: %s", err, vlab.TailFile(filepath.Join(run, "logs", "error.log"), 10))
	}
	return nil
}

// dnsmasqArgs is the lab's dnsmasq (as in internal/testkit/vlab) with a dynamic pool instead of static
// hosts, and room for 1000 TFTP transfers (the default 50 would make clients beyond the 50th
// time out and retry), and without its ICMP check that an address is free (--no-ping) unless
// ping: dnsmasq waits for that echo in its main loop, deaf to other DHCP packets, 3 s per new
// address, which makes a storm of 200 fail (clients give up after 3 retries), so the baseline
// would measure nothing. bootd's ARP probe (300 ms, concurrent) has no counterpart then.
func (s *baselineServer) dnsmasqArgs(run string) []string {
	ping := []string{"--no-ping"}
	if s.ping {
		ping = nil
	}
	return append(ping,
		"--keep-in-foreground", "--log-facility="+filepath.Join(run, "logs", "dnsmasq.log"),
		"--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--port=0",
		"--interface="+s.lab.Bridge, "--bind-interfaces",
		"--user=root", "--group=root",
		"--pid-file="+filepath.Join(run, "dnsmasq.pid"),
		"--dhcp-leasefile="+filepath.Join(run, "dnsmasq.leases"),
		"--dhcp-range="+poolStart+","+poolEnd+",255.255.255.0,"+leaseTime,
		"--dhcp-lease-max=1000",
		"--enable-tftp", "--tftp-root="+vlab.IPXEDir, "--tftp-max=1000",
		"--dhcp-userclass=set:ipxe,iPXE",
		"--dhcp-match=set:efi64,option:client-arch,7",
		"--dhcp-boot=tag:ipxe,boot.ipxe",
		"--dhcp-boot=tag:!ipxe,tag:efi64,ipxe.efi",
		"--dhcp-boot=tag:!ipxe,tag:!efi64,undionly.kpxe",
	)
}

// nginxConf is a private nginx: its own pid, logs and temp paths under run, bound to the bridge
// address only, sendfile on as in Debian's default configuration, one worker per core.
func (s *baselineServer) nginxConf(run string) string {
	p := func(name string) string { return filepath.Join(run, name) }
	return `daemon off;
master_process on;
worker_processes auto;
user root root;
pid ` + p("nginx.pid") + `;
events { worker_connections 4096; }
http {
  access_log ` + p("logs/access.log") + `;
  client_body_temp_path ` + p("tmp/body") + `;
  proxy_temp_path ` + p("tmp/proxy") + `;
  fastcgi_temp_path ` + p("tmp/fastcgi") + `;
  uwsgi_temp_path ` + p("tmp/uwsgi") + `;
  scgi_temp_path ` + p("tmp/scgi") + `;
  default_type application/octet-stream;
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 65;
  server {
    listen ` + s.lab.Addr.Addr().String() + `:80;
    root ` + s.filesRoot + `;
    location /images/ { }
  }
}
`
}

func (s *baselineServer) Leaders() []int {
	return []int{s.dnsmasq.Cmd.Process.Pid, s.nginx.Cmd.Process.Pid}
}

func (s *baselineServer) Stop() {
	stop(s.nginx)
	stop(s.dnsmasq)
}

// stop ends a server with SIGTERM, then SIGKILL to its group if it lingers.
func stop(p *vlab.Process) {
	if p == nil || p.Exited() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p.Wait(ctx) != nil && !p.Exited() {
		p.Kill()
		_ = p.Wait(context.Background())
	}
}

// waitFor polls ok every 50 ms until it holds, p exits, or d passes.
func waitFor(ctx context.Context, d time.Duration, p *vlab.Process, ok func() bool) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if ok() {
			return nil
		}
		if p.Exited() {
			return errors.New("process exited")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after %s", d)
}

// usage is what the kernel accounts to a set of processes.
type usage struct {
	CPU   time.Duration // user + system
	HWM   int64         // sum of the processes' peak resident set (VmHWM), bytes
	Procs int
}

// measure sums CPU time and peak RSS over every process in the given process groups (vlab
// starts each server as a group leader; nginx's workers are in its group).
func measure(leaders []int) (usage, error) {
	groups := map[int]bool{}
	for _, l := range leaders {
		groups[l] = true
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return usage{}, err
	}
	var u usage
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := procstat.Read(pid)
		if err != nil || !groups[st.PGrp] {
			continue // gone, or not the server's
		}
		u.CPU += st.CPU
		u.HWM += vmHWM(pid)
		u.Procs++
	}
	if u.Procs == 0 {
		return u, fmt.Errorf("no process left in groups %v", leaders)
	}
	return u, nil
}

func vmHWM(pid int) int64 {
	v, err := procstat.Status(pid, "VmHWM")
	if err != nil {
		return 0
	}
	kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	return kb << 10
}

// capture runs tcpdump on the lab's bridge into file until the returned stop is called: the
// storm's DHCP, TFTP and ARP packets (first 400 bytes: DHCP in full), for reading a slow figure packet by packet.
func capture(ctx context.Context, lab *vlab.Lab, file string) (stopCapture func(), err error) {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return nil, err
	}
	// TFTP data flows between ephemeral ports, so the filter takes all of UDP but HTTP's TCP.
	p, err := lab.Start(ctx, file+".log", "tcpdump", "-i", lab.Bridge, "-n", "-U", "-s", "400", "-B", "16384",
		"-w", file, "arp or udp")
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 5*time.Second, p, func() bool {
		b, _ := os.ReadFile(file + ".log")
		return strings.Contains(string(b), "listening on")
	}); err != nil {
		stop(p)
		return nil, fmt.Errorf("tcpdump did not start: %w: %s", err, vlab.TailFile(file+".log", 5))
	}
	return func() { stop(p) }, nil
}

// scrapedBootd is bootd while a Prometheus (Debian's prometheus, in the lab's namespace) scrapes
// its /metrics every second, as a lab's monitoring would, only ten times as often. Prometheus is
// started before bootd's storm and has scraped it once before the storm begins; its own CPU is
// not counted with bootd's (in a lab it runs on the master), but it shares the cores.
type scrapedBootd struct {
	bootdServer
	prom *vlab.Process
}

func (s *scrapedBootd) Name() string { return "bootd-scraped" }

// promConfig scrapes bootd's /metrics every second.
const promConfig = `global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: bootd
    static_configs:
      - targets: ["%s:80"]
`

func (s *scrapedBootd) Start(ctx context.Context) error {
	if err := s.bootdServer.Start(ctx); err != nil {
		return err
	}
	run := filepath.Join(s.dir, "prometheus")
	if err := os.RemoveAll(run); err != nil {
		return err
	}
	if err := os.MkdirAll(run, 0o755); err != nil {
		return err
	}
	conf := filepath.Join(run, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(promConfig, s.lab.Addr.Addr())), 0o644); err != nil {
		return err
	}
	var err error
	s.prom, err = s.lab.Start(ctx, filepath.Join(run, "prometheus.log"), "prometheus", "--config.file="+conf,
		"--storage.tsdb.path="+filepath.Join(run, "data"), "--web.listen-address=127.0.0.1:9090")
	if err != nil {
		return err
	}
	// Up once Prometheus has a sample of bootd's: up{job="bootd"} == 1.
	url := `http://127.0.0.1:9090/api/v1/query?query=up%7Bjob%3D%22bootd%22%7D%3D%3D1`
	return waitFor(ctx, 30*time.Second, s.prom, func() bool {
		out, err := s.lab.Command(ctx, "wget", "-q", "-O", "-", url).Output()
		return err == nil && strings.Contains(string(out), `"value":[`)
	})
}

func (s *scrapedBootd) Stop() {
	stop(s.prom)
	s.bootdServer.Stop()
}
