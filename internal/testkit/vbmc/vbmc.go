// Package vbmc runs OpenIPMI's ipmi_sim as a node's BMC for tests: real IPMI 2.0 over LAN
// (RMCP+, as ipmitool -I lanplus speaks it) at an address in a test's namespace. ipmi_sim hands
// chassis power control to a script; this one records every request and keeps the power state
// in a file, which the test reads (Power, Requests) and follows (Watch) to cut a node's power or
// boot it.
package vbmc

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/vlab"
)

// Config is one BMC.
type Config struct {
	Name     string         // the node's name: ipmi_sim's BMC name
	Dir      string         // its files: lan.conf, commands, the chassis script, state, log
	Addr     netip.AddrPort // where it answers IPMI (port 623 as a real BMC)
	User     string         // the one administrator account
	Password string
	On       bool // power at start
}

// Where runs programs in a namespace: a vlab.Host or a vlab.Lab.
type Where interface {
	Start(ctx context.Context, logPath, name string, args ...string) (*vlab.Process, error)
	Command(ctx context.Context, name string, args ...string) *exec.Cmd
}

// BMC is a running ipmi_sim.
type BMC struct {
	cfg   Config
	where Where
	proc  *vlab.Process
}

// Start writes the BMC's files, starts ipmi_sim in where, and waits until it answers
// ipmitool's power status with the configured credentials.
func Start(ctx context.Context, where Where, cfg Config) (*BMC, error) {
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "state"), 0o755); err != nil {
		return nil, err
	}
	power := "0"
	if cfg.On {
		power = "1"
	}
	files := map[string]string{"lan.conf": lanConf(cfg), "commands": commands, "chassis": chassisScript(cfg.Dir), "power": power + "\n"}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(cfg.Dir, name), []byte(data), 0o755); err != nil {
			return nil, err
		}
	}
	p, err := where.Start(ctx, filepath.Join(cfg.Dir, "ipmi_sim.log"), "ipmi_sim", "-n",
		"-c", filepath.Join(cfg.Dir, "lan.conf"), "-f", filepath.Join(cfg.Dir, "commands"), "-s", filepath.Join(cfg.Dir, "state"))
	if err != nil {
		return nil, err
	}
	b := &BMC{cfg: cfg, where: where, proc: p}
	return b, b.waitAnswering(ctx)
}

// lanConf is ipmi_sim's configuration: one LAN channel at the address, an admin account, and
// the chassis script for power control.
func lanConf(cfg Config) string {
	return fmt.Sprintf(`name "%s"
set_working_mc 0x20
  startlan 1
    addr %s %d
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  chassis_control "%s"
  user 1 true  ""  ""  user  10 none md2 md5 straight
  user 2 true  "%s" "%s" admin 10 none md2 md5 straight
`, cfg.Name, cfg.Addr.Addr(), cfg.Addr.Port(), filepath.Join(cfg.Dir, "chassis"), cfg.User, cfg.Password)
}

// commands make the BMC itself: one management controller at 0x20 with a chassis device.
const commands = `mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
mc_enable 0x20
`

// chassisScript is ipmi_sim's chassis control program ("get power", "set power 1"): it logs
// each request and keeps the power in a file, replaced whole so a reader never sees it half
// written.
func chassisScript(dir string) string {
	return fmt.Sprintf(`#!/bin/sh
dir=%q
echo "$*" >> "$dir/requests.log"
op=$1
shift
case "$op" in
get)
  for p in "$@"; do
    case $p in
    power) echo "power:$(cat "$dir/power")" ;;
    boot) echo "boot:default" ;;
    esac
  done ;;
set)
  while [ $# -ge 2 ]; do
    if [ "$1" = power ]; then echo "$2" > "$dir/power.new" && mv "$dir/power.new" "$dir/power"; fi
    shift 2
  done ;;
*) exit 1 ;;
esac
`, dir)
}

// waitAnswering asks the BMC for its power status with ipmitool until it answers, bounded.
func (b *BMC) waitAnswering(ctx context.Context) error {
	var out []byte
	for range 50 {
		if b.proc.Exited() {
			return fmt.Errorf("vbmc %s: ipmi_sim exited: %s", b.cfg.Name, vlab.TailFile(b.proc.LogPath, 10))
		}
		var err error
		if out, err = b.Ipmitool(ctx, "chassis", "power", "status"); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("vbmc %s: no answer at %s: %s", b.cfg.Name, b.cfg.Addr, out)
}

// Ipmitool runs ipmitool against the BMC, from where it runs, with its credentials.
func (b *BMC) Ipmitool(ctx context.Context, args ...string) ([]byte, error) {
	base := []string{"-I", "lanplus", "-C", "3", "-H", b.cfg.Addr.Addr().String(), "-p", fmt.Sprint(b.cfg.Addr.Port()),
		"-U", b.cfg.User, "-E", "-N", "1", "-R", "1"}
	cmd := b.where.Command(ctx, "ipmitool", append(base, args...)...)
	cmd.Env = append(os.Environ(), "IPMITOOL_PASSWORD="+b.cfg.Password)
	return cmd.CombinedOutput()
}

// Power reports whether the BMC holds the node's power on.
func (b *BMC) Power() (bool, error) {
	data, err := os.ReadFile(filepath.Join(b.cfg.Dir, "power"))
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(data)) == "1", nil
}

// Requests are the chassis requests ipmi_sim passed on, in order: "get power", "set power 1".
func (b *BMC) Requests() []string {
	f, err := os.Open(filepath.Join(b.cfg.Dir, "requests.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// Sets are the power changes asked of the BMC, in order: "set power 0", "set power 1".
func (b *BMC) Sets() []string {
	var sets []string
	for _, r := range b.Requests() {
		if strings.HasPrefix(r, "set power ") {
			sets = append(sets, r)
		}
	}
	return sets
}

// Watch calls changed with the new power each time it changes, polling every 100 ms until ctx
// ends. changed runs on Watch's goroutine: a slow one delays the next poll.
func (b *BMC) Watch(ctx context.Context, changed func(on bool)) {
	last, _ := b.Power()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		on, err := b.Power()
		if err == nil && on != last {
			last = on
			changed(on)
		}
	}
}

// LogPath is ipmi_sim's own output.
func (b *BMC) LogPath() string { return b.proc.LogPath }
