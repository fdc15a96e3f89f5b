package httpd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"text/template"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/labcluster/gpucluster/internal/logfield"
)

// maxFact bounds each fact taken from a query string: firmware strings are short, hostile ones need not be.
const maxFact = 128

func (s *Server) bootScript(w http.ResponseWriter, r *http.Request) {
	s.render(w, chainScript, s.opts.BaseURL)
}

func (s *Server) machineScript(w http.ResponseWriter, r *http.Request) {
	q := ipxeQuery(r.URL.RawQuery)
	mac, err := net.ParseMAC(strings.ReplaceAll(q.Get("mac"), "-", ":"))
	if err != nil || len(mac) != 6 {
		http.Error(w, "bad or missing mac", http.StatusBadRequest)
		return
	}
	s.log.WithField("query", r.URL.RawQuery).Debug("machine script requested")
	facts := factsFrom(q.Get)
	from, _ := remoteAddr(r)
	t, ok, err := s.machines.Boot(mac, from, facts)
	log := s.log.WithFields(logrus.Fields{"mac": mac.String(), "remote": r.RemoteAddr})
	switch {
	case errors.Is(err, ErrForbidden):
		s.remote.Log(log.WithError(err), logrus.WarnLevel, "refused a machine script request")
		http.Error(w, "forbidden", http.StatusForbidden)
	case err != nil:
		log.WithError(err).Error("cannot boot machine")
		s.render(w, errorScript, printable(err.Error(), 400))
	case !ok && q.Get("poll") != "":
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, stillWaiting)
	case !ok:
		log.WithFields(logrus.Fields{"serial": facts.Serial, "product": facts.Product}).Info("machine waiting to be named")
		s.render(w, discoveryScript, s.discoveryView(mac, facts))
	default:
		s.serveTarget(w, t, log)
	}
}

func (s *Server) serveTarget(w http.ResponseWriter, t Target, log logrus.FieldLogger) {
	v, err := s.targetView(t)
	if err != nil {
		log.WithError(err).Error("refusing to boot with an unsafe image")
		http.Error(w, "image not bootable", http.StatusInternalServerError)
		return
	}
	log.WithFields(logrus.Fields{"node": t.Name, "image": t.Image, "version": t.Version}).Info("sending boot script")
	s.render(w, targetScript, v)
}

// factsFrom takes the facts from the query, as printable text only: they end up in the admin's
// terminal (bootd nodes), where an escape sequence from a hostile client must not.
func factsFrom(get func(string) string) Facts {
	f := func(k string) string {
		if v := printable(get(k), maxFact); v != "-" {
			return v
		}
		return ""
	}
	return Facts{UUID: f("uuid"), Manufacturer: f("manufacturer"), Product: f("product"), Serial: f("serial"), Arch: f("arch"), Platform: f("platform")}
}

func (s *Server) render(w http.ResponseWriter, t *template.Template, data any) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := t.Execute(w, data); err != nil {
		s.log.WithError(err).Error("render iPXE script")
	}
}

func (s *Server) imageFile(w http.ResponseWriter, r *http.Request) {
	image, version, file := r.PathValue("image"), r.PathValue("version"), r.PathValue("file")
	s.serveFile(w, r, []string{image, version, file}, func() (*os.File, error) { return s.files.OpenImageFile(image, version, file) })
}

// chunk serves one chunk of the chunk store in desync's HTTP layout (/chunks/<4 hex>/<64 hex>).
func (s *Server) chunk(w http.ResponseWriter, r *http.Request) {
	prefix, name := r.PathValue("prefix"), r.PathValue("name")
	s.serveChunk(w, r, prefix, name)
}

func (s *Server) fetchInitrd(w http.ResponseWriter, r *http.Request) {
	s.serveFile(w, r, []string{"node", s.opts.FetchInitrd}, s.files.OpenFetchInitrd)
}

func (s *Server) loader(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	s.serveFile(w, r, []string{name}, func() (*os.File, error) { return s.files.OpenLoader(name) })
}

// serveFile sends a file with Content-Length and Range support, after checking that every path
// element is a plain name, and logs the transfer.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, elems []string, open func() (*os.File, error)) {
	if !plainNames(elems...) {
		http.NotFound(w, r)
		return
	}
	f, err := open()
	if err != nil {
		s.notFound(w, r, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, "stat failed", http.StatusInternalServerError)
		return
	}
	start := time.Now()
	done := s.following(r, elems)
	http.ServeContent(withProgressDeadline(w), r, elems[len(elems)-1], st.ModTime(), f)
	done()
	s.log.WithFields(logrus.Fields{"file": strings.Join(elems, "/"), "remote": r.RemoteAddr, "bytes": st.Size(),
		"range": r.Header.Get("Range") != "", "duration": logfield.Duration(time.Since(start))}).Info("served file")
}

// following tells Options.Progress that an image file's download to the request's address
// begins, and returns what tells it the download ended (cut short when the client went away).
func (s *Server) following(r *http.Request, elems []string) (done func()) {
	from, err := remoteAddr(r)
	if s.opts.Progress == nil || err != nil || len(elems) != 3 { // 3: image, version, file
		return func() {}
	}
	file := elems[2]
	s.opts.Progress.Fetching(from, file)
	return func() { s.opts.Progress.Fetched(from, file, r.Context().Err()) }
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request, err error) {
	if !errors.Is(err, ErrNotFound) {
		s.log.WithError(err).WithField("path", r.URL.Path).Error("open failed")
	}
	http.NotFound(w, r)
}

func (s *Server) inventory(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s.machines.Inventory())
}

// hello lets a booted node report itself up: it is identified as for its overlay.
func (s *Server) hello(w http.ResponseWriter, r *http.Request) {
	from, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		http.Error(w, "bad remote address", http.StatusBadRequest)
		return
	}
	t, err := s.nodes.Hello(netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), nodeToken(r))
	if err != nil {
		s.refuse(w, r, err, "hello")
		return
	}
	s.log.WithFields(logrus.Fields{"node": t.Name, "address": t.Address}).Info("node is up")
	fmt.Fprintf(w, "%s %s %s\n", t.Name, t.Role, t.Address)
}

// plainNames reports whether every element is one plain file name. Path values arrive
// percent-decoded, so "..%2f" would otherwise reach the backend as "../".
func plainNames(elems ...string) bool {
	for _, e := range elems {
		if e == "" || e == "." || e == ".." || strings.ContainsAny(e, "/\\\x00") {
			return false
		}
	}
	return true
}

// ipxeQuery parses a query string the way iPXE writes it: its uristring type escapes what a URI
// needs but leaves "+", which url.ParseQuery would turn into a space ("i440FX + PIIX").
func ipxeQuery(raw string) url.Values {
	v := url.Values{}
	for _, pair := range strings.Split(raw, "&") {
		k, val, _ := strings.Cut(pair, "=")
		if k, err := url.PathUnescape(k); err == nil {
			if val, err := url.PathUnescape(val); err == nil {
				v.Add(k, val)
			}
		}
	}
	return v
}

func remoteAddr(r *http.Request) (netip.Addr, error) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return ap.Addr().Unmap(), err
}
