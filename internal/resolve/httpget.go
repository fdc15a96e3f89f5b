package resolve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"
)

// A mirror that accepts the connection and then sends nothing must fail the build, not hang it.
// There is no deadline on a whole download (a CUDA package is GBs over a lab's slow link), but no
// single wait may last long: the default transport bounds the connect (30 s) and the TLS
// handshake (10 s); stallTimeout bounds the wait for the response headers and for each read of
// the body. A variable so tests can shorten it.
var stallTimeout = 60 * time.Second

// ErrStalled is a mirror that sent nothing for stallTimeout.
var ErrStalled = errors.New("mirror stalled")

// newHTTPClient is the client for every HTTP fetch imgbuild makes itself (dnf has its own
// timeout and minrate). It keeps the default transport's proxy from the environment, its connect
// and TLS timeouts, and HTTP/2.
func newHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = stallTimeout
	return &http.Client{Transport: t}
}

// httpGet GETs raw with client and returns the body of a 200 response, whose reads fail with
// ErrStalled after stallTimeout without a byte. Its errors name the URL; the body's do not (the
// caller's do, with what it was fetching).
func httpGet(parent context.Context, client *http.Client, raw string) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(parent)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("fetch %s: %w", raw, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("fetch %s: %w", raw, doError(parent, err))
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("fetch %s: %s", raw, resp.Status)
	}
	b := &stallBody{body: resp.Body, cancel: cancel, limit: stallTimeout}
	// Cancelling the request is what ends a read blocked on a silent connection.
	b.timer = time.AfterFunc(b.limit, func() { b.stalled.Store(true); cancel() })
	b.timer.Stop()
	return b, nil
}

// doError says that a request timed out waiting for the mirror (the dial, TLS or the response
// headers) as a stall, unless the caller's own context ended it. url.Error's "Get <url>" goes:
// the caller names the URL.
func doError(ctx context.Context, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %w", ErrStalled, err)
	}
	return err
}

// stallBody is a response body whose reads fail with ErrStalled after stallTimeout without a
// byte. The watchdog runs only while a read waits, so a slow consumer (a disk writing a GB) is
// never taken for a stalled mirror.
type stallBody struct {
	body    io.ReadCloser
	cancel  context.CancelFunc
	limit   time.Duration
	timer   *time.Timer
	stalled atomic.Bool
}

func (b *stallBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.limit)
	n, err := b.body.Read(p)
	b.timer.Stop()
	if err != nil && b.stalled.Load() {
		return n, fmt.Errorf("%w: no byte for %s", ErrStalled, b.limit)
	}
	return n, err
}

func (b *stallBody) Close() error {
	b.timer.Stop()
	b.cancel()
	return b.body.Close()
}
