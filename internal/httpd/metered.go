package httpd

import (
	"io"
	"net/http"
	"time"
)

// metered counts each request mux serves with m: the pattern that took it, status, time and
// bytes. The pattern is read after mux has served: ServeMux sets it on the request it was given.
func metered(mux *http.ServeMux, m Meter) http.Handler {
	if _, none := m.(noMeter); none {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		mw := &meteredWriter{ResponseWriter: w}
		mux.ServeHTTP(mw, r)
		if mw.code == 0 {
			mw.code = http.StatusOK // a handler that wrote nothing
		}
		m.HTTPRequest(r.Pattern, mw.code, time.Since(start), mw.bytes)
	})
}

// meteredWriter notes a response's status and bytes. It passes ReadFrom on, so that a file
// download still leaves by sendfile (bulk.go), and unwraps for http.ResponseController.
type meteredWriter struct {
	http.ResponseWriter
	code  int
	bytes int64
}

func (m *meteredWriter) Unwrap() http.ResponseWriter { return m.ResponseWriter }

func (m *meteredWriter) WriteHeader(code int) {
	if m.code == 0 {
		m.code = code
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *meteredWriter) Write(b []byte) (int, error) {
	if m.code == 0 {
		m.code = http.StatusOK
	}
	n, err := m.ResponseWriter.Write(b)
	m.bytes += int64(n)
	return n, err
}

func (m *meteredWriter) ReadFrom(src io.Reader) (int64, error) {
	if m.code == 0 {
		m.code = http.StatusOK
	}
	var n int64
	var err error
	if rf, ok := m.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		n, err = io.Copy(m.ResponseWriter, src)
	}
	m.bytes += n
	return n, err
}
