package httpd

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/labcluster/gpucluster/internal/testkit/testhook"
)

// A download that stops moving is cut after sendTimeout; one that keeps reading gets every byte,
// however long it takes in all.
func TestStalledDownloadIsCut(t *testing.T) {
	testhook.Set(t, &sendTimeout, 300*time.Millisecond)
	testhook.Set(t, &sendChunk, 1<<20)

	dir := t.TempDir()
	const size = 64 << 20 // well past the loopback socket buffers
	if err := os.WriteFile(filepath.Join(dir, "vmlinuz"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "vmlinuz"), size); err != nil {
		t.Fatal(err)
	}
	addr := serveLoopbackFrom(t, dir)
	const req = "GET /images/compute/1/vmlinuz HTTP/1.1\r\nHost: x\r\n\r\n"

	for _, tc := range []struct {
		name  string
		pause time.Duration // after the headers, before reading the body
		pace  time.Duration // between 256 KiB reads
		whole bool
	}{
		{"a client that stops reading is cut", 2 * time.Second, 0, false},
		{"a slow but steady client gets it all", 0, 2 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp4", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// A small receive buffer, so the server's sends block soon.
			_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
			_ = c.SetDeadline(time.Now().Add(60 * time.Second))
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReaderSize(c, 256<<10)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(tc.pause)
			var got int64
			buf := make([]byte, 256<<10)
			for {
				n, err := resp.Body.Read(buf)
				got += int64(n)
				if err != nil {
					break
				}
				time.Sleep(tc.pace)
			}
			if whole := got == size; whole != tc.whole {
				t.Fatalf("got %d of %d bytes; want the whole file: %v", got, size, tc.whole)
			}
			t.Logf("%d of %d bytes", got, size)
		})
	}
}
