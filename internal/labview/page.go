package labview

import (
	"bytes"
	"embed"
	"encoding/json"
	"html/template"
	"net/http"
	"time"
)

//go:embed ui/page.html.tmpl ui/lab.js ui/lab.css
var ui embed.FS

// page is the lab's page: "page" the whole of it, "lab" the part that lab.js fetches again
// every two seconds (?part=lab), so the server renders both with one template and its escaping
// (a machine's facts come from its firmware: anyone on the segment chooses them).
var page = template.Must(template.New("").Funcs(template.FuncMap{
	"clock": func(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05") },
	"iso":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"ago":   ago,
}).ParseFS(ui, "ui/page.html.tmpl"))

// ago is how long before now t was, to the second ("—" for never).
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return now.Sub(t).Round(time.Second).String() + " ago"
}

// Routes are the views' handlers by ServeMux pattern, for bootd's HTTP listener: the page and
// its two files, its JSON, and Prometheus service discovery. All read-only.
func Routes(src Source) map[string]http.Handler {
	return map[string]http.Handler{
		"GET /{$}":        servePage(src),
		"GET /ui/lab.js":  serveFile("ui/lab.js", "text/javascript; charset=utf-8"),
		"GET /ui/lab.css": serveFile("ui/lab.css", "text/css; charset=utf-8"),
		"GET /api/v1/lab": serveJSON(src),
		"GET /api/v1/sd":  serveSD(src),
	}
}

// pageHeaders keep the page to itself: its script and style from bootd only, no inline code, no
// framing, no referrer to other sites.
func pageHeaders(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

func servePage(src Source) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := "page"
		if r.URL.Query().Get("part") == "lab" {
			name = "lab"
		}
		var buf bytes.Buffer // whole, so a template error never leaves half a page
		if err := page.ExecuteTemplate(&buf, name, src.Lab()); err != nil {
			http.Error(w, "page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		pageHeaders(w, "text/html; charset=utf-8")
		_, _ = w.Write(buf.Bytes())
	}
}

func serveFile(name, contentType string) http.HandlerFunc {
	data, err := ui.ReadFile(name)
	if err != nil {
		panic(err) // embedded above: a missing file is a build mistake
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		pageHeaders(w, contentType)
		_, _ = w.Write(data)
	}
}

func serveJSON(src Source) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(src.Lab().withLists())
	}
}

// withLists has empty lists where l has none, so that the JSON says [] rather than null.
func (l Lab) withLists() Lab {
	if l.Nodes == nil {
		l.Nodes = []Node{}
	}
	if l.Waiting == nil {
		l.Waiting = []Machine{}
	}
	if l.Images == nil {
		l.Images = []RoleImage{}
	}
	return l
}
