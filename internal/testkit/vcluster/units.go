package vcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// unit is a systemd service of the image, reduced to what starting it takes: the account it
// runs as, its command in the foreground, the EnvironmentFile and variable its ExecStart
// expands, and how to tell it is up.
type unit struct {
	name    string
	user    string // "" is root
	argv    []string
	envFile string
	envVar  string
	ready   func(ctx context.Context, n *Node, d *daemon) error
}

// The node's journal (NodeFiles.Journal): the syslog socket journald binds, /dev/log's target, and
// the directory of its persistent journal.
const (
	journalDevLog = "/run/systemd/journal/dev-log"
	journalDir    = "/var/log/journal"
)

var (
	// systemd-journald.service: ExecStart=/usr/lib/systemd/systemd-journald. Started without
	// socket activation it binds its sockets itself (native, stdout and /run/systemd/journal/
	// dev-log); the node's /dev has no kmsg, so the host's kernel log stays out of the node's.
	journaldUnit = unit{
		name: "journald", argv: []string{"/usr/lib/systemd/systemd-journald"},
		ready: func(ctx context.Context, n *Node, d *daemon) error {
			return poll(ctx, d, 50, 100*time.Millisecond, func() bool {
				st, err := os.Stat(n.Path(journalDevLog))
				return err == nil && st.Mode()&os.ModeSocket != 0
			})
		},
	}
	// munge.service: User=munge, ExecStart=/usr/sbin/munged $OPTIONS (-F keeps it in the
	// foreground instead of Type=forking).
	mungeUnit = unit{
		name: "munge", user: "munge", argv: []string{"munged", "-F"},
		envFile: "/etc/sysconfig/munge", envVar: "OPTIONS",
		// Up when its socket accepts a connection: after a restart, the old daemon's socket file
		// is there before the new one listens.
		ready: func(ctx context.Context, n *Node, d *daemon) error {
			return poll(ctx, d, 50, 100*time.Millisecond, func() bool {
				c, err := net.Dial("unix", n.Path("/run/munge/munge.socket.2"))
				if err == nil {
					c.Close()
				}
				return err == nil
			})
		},
	}
	// chronyd.service: ExecStart=/usr/sbin/chronyd $OPTIONS, from /etc/sysconfig/chronyd. The
	// harness adds what a shared test host needs, on the command line so the rendered
	// /etc/chrony.conf stays as rendered: -x, because every node's namespaces share the host's
	// one system clock (no namespace has a real-time clock of its own), so no node may step or
	// slew it; chronyd still measures its sources, selects one and serves time. -f
	// /etc/chrony.conf, because Debian builds chronyd to read /etc/chrony/chrony.conf, Rocky's
	// reads the rendered path. -d keeps it in the foreground instead of Type=forking.
	chronydUnit = unit{
		name: "chronyd", argv: []string{"chronyd", "-d", "-x", "-f", "/etc/chrony.conf"},
		envFile: "/etc/sysconfig/chronyd", envVar: "OPTIONS",
		ready: func(ctx context.Context, n *Node, d *daemon) error {
			return poll(ctx, d, 50, 100*time.Millisecond, func() bool {
				st, err := os.Stat(n.Path(chronySocket))
				return err == nil && st.Mode()&os.ModeSocket != 0
			})
		},
	}
	// slurmctld.service: ExecStart=/usr/sbin/slurmctld -D -s $SLURMCTLD_OPTIONS.
	slurmctldUnit = unit{
		name: "slurmctld", argv: []string{"slurmctld", "-D", "-s"},
		envFile: "/etc/sysconfig/slurmctld", envVar: "SLURMCTLD_OPTIONS",
		ready: func(ctx context.Context, n *Node, d *daemon) error {
			return poll(ctx, d, 60, 500*time.Millisecond, func() bool {
				out, err := n.Run(ctx, "scontrol", "ping")
				return err == nil && strings.Contains(string(out), "is UP")
			})
		},
	}
	// slurmd.service: ExecStart=/usr/sbin/slurmd -D -s $SLURMD_OPTIONS. It is up when the
	// controller lists it: see Cluster.WaitIdle.
	slurmdUnit = unit{
		name: "slurmd", argv: []string{"slurmd", "-D", "-s"},
		envFile: "/etc/sysconfig/slurmd", envVar: "SLURMD_OPTIONS",
	}
)

// unitsFor returns the units a role enables, in start order: the journal first when the node
// has one (systemd-journald starts before every service), then time (time-sync.target comes
// before the cluster's daemons), then munge, then Slurm. A node without a role runs munge alone.
func unitsFor(role string, journal bool) []unit {
	var units []unit
	if journal {
		units = append(units, journaldUnit)
	}
	switch role {
	case "master":
		return append(units, chronydUnit, mungeUnit, slurmctldUnit)
	case "compute":
		return append(units, chronydUnit, mungeUnit, slurmdUnit)
	}
	return append(units, mungeUnit)
}

// startUnit starts a unit's process in the node with its options from the node's own
// EnvironmentFile, its output going to the unit's log, and waits until it is ready.
func (n *Node) startUnit(ctx context.Context, u unit) error {
	argv := append([]string(nil), u.argv...)
	if u.envFile == "" {
		// no EnvironmentFile
	} else if b, err := os.ReadFile(n.Path(u.envFile)); err == nil {
		env, err := parseEnvFile(b)
		if err != nil {
			return fmt.Errorf("%s: %w", u.envFile, err)
		}
		words, err := splitWords(env[u.envVar])
		if err != nil {
			return fmt.Errorf("%s: %s: %w", u.envFile, u.envVar, err)
		}
		argv = append(argv, words...)
	} else if !os.IsNotExist(err) {
		return err
	}
	if u.user != "" {
		argv = append([]string{"setpriv", "--reuid=" + u.user, "--regid=" + u.user, "--init-groups", "--"}, argv...)
	}
	logf, err := os.OpenFile(n.LogPath(u.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "vcluster: %s: %s\n", n.Name, strings.Join(argv, " "))
	// Not tied to ctx: the daemon lives until the node is closed (its init killed).
	cmd := n.Command(context.Background(), argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", u.name, err)
	}
	d := &daemon{unit: u.name, logPath: logf.Name(), cmd: cmd, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	n.cluster.mu.Lock()
	n.daemons = append(n.daemons, d)
	n.cluster.mu.Unlock()
	if u.ready == nil {
		return nil
	}
	if err := u.ready(ctx, n, d); err != nil {
		return fmt.Errorf("%s not ready: %w\n%s", u.name, err, vlab.TailFile(d.logPath, 15))
	}
	if d.exited() {
		return fmt.Errorf("%s exited: %v\n%s", u.name, d.err, vlab.TailFile(d.logPath, 15))
	}
	return nil
}

// StartDaemon runs argv in the node as the daemon name, in the foreground, its output in the
// node's log of that name (LogPath), until the node is closed; the cluster's checks report it if
// it exits. For daemons the harness does not start itself (the monitoring layer's, say): the test
// takes their command lines from the image's own units.
func (n *Node) StartDaemon(ctx context.Context, name string, argv ...string) error {
	return n.startUnit(ctx, unit{name: name, argv: argv})
}

// poll calls ok up to tries times, every interval, until it returns true; bounded by ctx, and
// given up as soon as the daemon exits.
func poll(ctx context.Context, d *daemon, tries int, interval time.Duration, ok func() bool) error {
	for i := 0; i < tries; i++ {
		if ok() {
			return nil
		}
		if d.exited() {
			return fmt.Errorf("exited: %v", d.err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
	return fmt.Errorf("not ready after %d tries, %s apart", tries, interval)
}
