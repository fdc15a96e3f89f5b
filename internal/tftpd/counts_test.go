package tftpd

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/labcluster/gpucluster/internal/testkit/testhook"
)

// meter keeps the last totals a Worker reported.
type meter struct {
	mu   sync.Mutex
	last Counts
	n    int
}

func (m *meter) TFTPTransfers(c Counts) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last, m.n = c.clone(), m.n+1
}

func (m *meter) get() Counts {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last.clone()
}

// TestWorkerCountsTransfers runs real workers (this test binary) and checks what bootd's side is
// told: transfers by outcome and file, bytes, durations, across a worker's death, whatever the
// rate limit did to the log lines.
func TestWorkerCountsTransfers(t *testing.T) {
	testhook.Set(t, &countsEvery, 20*time.Millisecond)
	testhook.Set(t, &restartDelay, 50*time.Millisecond)
	base, _ := logtest.NewNullLogger()
	base.SetLevel(logrus.InfoLevel) // as bootd runs: the tsize probe's line is not even sent
	srv, err := New(ipxeDir(t), base.WithField("listener", "tftp"))
	if err != nil {
		t.Fatal(err)
	}
	conn := loopback(t)
	addr := conn.LocalAddr().String()
	m := &meter{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Worker{Exe: testExe(t), Server: srv, Meter: m}.Serve(ctx, conn) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	checkServes(t, addr, "undionly.kpxe")
	checkServes(t, addr, "undionly.kpxe")
	for _, path := range []string{"../secret", "pxelinux.0", "snponly.efi"} { // snponly.efi: allowed, absent
		if _, err := client(t, addr, 0, false).Receive(path, "octet"); err == nil {
			t.Fatalf("%s served", path)
		}
	}
	probe := rrq(t, addr, "ipxe.efi", "tsize", "0", "blksize", "1468")
	_, peer := readOACK(t, probe)
	sendError(t, probe, peer, 8, "User aborted the transfer")

	want := func(c Counts) string {
		return fmt.Sprintf("done %v refused %v probe %v bytes %d", c.Transfers[OutcomeDone], c.Transfers[OutcomeRefused],
			c.Transfers[OutcomeProbe], c.Bytes["undionly.kpxe"])
	}
	size := uint64(len(content["undionly.kpxe"]))
	expect := fmt.Sprintf("done map[undionly.kpxe:2] refused map[none:2 snponly.efi:1] probe map[ipxe.efi:1] bytes %d", 2*size)
	waitFor(t, "the counts: "+expect, func() bool { return want(m.get()) == expect })
	c := m.get()
	var inBuckets uint64
	for _, n := range c.Buckets {
		inBuckets += n
	}
	if inBuckets != 2 || c.Seconds <= 0 {
		t.Errorf("duration histogram holds %d transfers (sum %v s), want the 2 done ones", inBuckets, c.Seconds)
	}

	// A new worker starts from zero; bootd's totals go on from the dead one's.
	pids := workerPids(t)
	if len(pids) != 1 {
		t.Fatalf("%d workers, want 1", len(pids))
	}
	killWorker(t, pids[0])
	waitFor(t, "a new worker", func() bool { p := workerPids(t); return len(p) == 1 && p[0] != pids[0] })
	checkServes(t, addr, "undionly.kpxe")
	expect = strings.Replace(expect, "undionly.kpxe:2", "undionly.kpxe:3", 1)
	expect = strings.Replace(expect, "bytes "+strconv.FormatUint(2*size, 10), "bytes "+strconv.FormatUint(3*size, 10), 1)
	waitFor(t, "the counts after a restart: "+expect, func() bool { return want(m.get()) == expect })
}

func TestCountsCheck(t *testing.T) {
	good := Counts{}
	good.add(OutcomeDone, "ipxe.efi", 10, time.Millisecond)
	good.add(OutcomeRefused, NoFile, 0, 0)
	tests := []struct {
		name  string
		entry string
		ok    bool
	}{
		{"counts as a worker sends them", mustJSON(t, good), true},
		{"no transfers yet", `{"transfers":null,"bytes":null,"buckets":null,"seconds":0}`, true},
		{"unknown outcome", `{"transfers":{"stolen":{"ipxe.efi":1}}}`, false},
		{"unknown file: a label bootd does not have", `{"transfers":{"done":{"../etc/passwd":1}}}`, false},
		{"bytes of an unknown file", `{"bytes":{"x":1}}`, false},
		{"wrong histogram", `{"buckets":[1,2]}`, false},
		{"negative count", `{"transfers":{"done":{"ipxe.efi":-1}}}`, false},
		{"negative seconds", `{"seconds":-1}`, false},
		{"not an object", `"lots"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := `{"level":"info","msg":"tftp transfer counts","` + countsField + `":` + tt.entry + "}\n"
			log, hook := logtest.NewNullLogger()
			var got []Counts
			relayLog(strings.NewReader(line), log, nil, func() {}, func(c Counts) { got = append(got, c) }, nil)
			if tt.ok != (len(got) == 1) {
				t.Fatalf("taken %d times, want ok=%v; log %v", len(got), tt.ok, hook.AllEntries())
			}
			if !tt.ok && hasEntry(hook, logrus.ErrorLevel, "tftp worker sent counts bootd does not take") == nil {
				t.Error("a refused counts entry was not logged")
			}
			if tt.ok && len(hook.AllEntries()) != 0 {
				t.Errorf("a counts entry was logged as a line: %v", hook.AllEntries()[0].Message)
			}
		})
	}
}

func killWorker(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
