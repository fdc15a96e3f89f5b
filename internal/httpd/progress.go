package httpd

import (
	"io"
	"net/http"
	"time"
)

// A file download must keep moving: every sendChunk bytes must leave within sendTimeout, or the
// connection is cut. A whole-response write timeout would not do: images are gigabytes and their
// transfer time depends on the lab's links. This is nginx's send_timeout, per chunk instead of per
// write (sendfile sends a chunk in one call). Variables for tests.
var (
	sendTimeout       = 60 * time.Second
	sendChunk   int64 = 4 << 20 // a client slower than ~70 KB/s for a minute is cut
)

// progressWriter gives each sendChunk of a file download a fresh write deadline. ServeContent
// hands the file to ReadFrom as an *io.LimitedReader around the *os.File; progressWriter passes it
// on in chunks of the same kind, so the kernel's sendfile still does the copying.
type progressWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func withProgressDeadline(w http.ResponseWriter) *progressWriter {
	return &progressWriter{ResponseWriter: w, rc: http.NewResponseController(w)}
}

// Unwrap lets http.ResponseController reach the connection under the wrapper.
func (p *progressWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

func (p *progressWriter) Write(b []byte) (int, error) {
	p.extend()
	return p.ResponseWriter.Write(b)
}

func (p *progressWriter) ReadFrom(src io.Reader) (int64, error) {
	lr, ok := src.(*io.LimitedReader)
	if !ok {
		p.extend()
		return io.Copy(p.ResponseWriter, src)
	}
	var total int64
	for lr.N > 0 {
		p.extend()
		chunk := &io.LimitedReader{R: lr.R, N: min(lr.N, sendChunk)}
		n, err := io.Copy(p.ResponseWriter, chunk)
		total += n
		lr.N -= n
		if err != nil {
			return total, err
		}
		if n == 0 {
			break // the file ended early
		}
	}
	return total, nil
}

func (p *progressWriter) extend() { _ = p.rc.SetWriteDeadline(time.Now().Add(sendTimeout)) }
