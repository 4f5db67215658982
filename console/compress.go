package console

import (
	"bytes"
	"compress/gzip"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

// Pages and assets go gzipped to a browser that accepts it: the console's
// HTML is repetitive (a few hundred bytes of markup per row) and htmx is
// 50 KB, so compression keeps every page far below 150 KB on the wire.
//
// Compressing a page that holds a secret (the CSRF token) next to text an
// attacker chooses is what BREACH exploits; it needs the victim's browser
// to fetch the page, signed in, at the attacker's request. The session
// cookie is SameSite=Strict, so a request another site starts is not
// signed in and its page holds no token.

// minGzip is the smallest answer worth compressing.
const minGzip = 1024

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.TrimSpace(q) != "q=0" {
			return true
		}
	}
	return false
}

// writeBody writes b with status, gzipped when the client accepts it and
// it is large enough.
func writeBody(w http.ResponseWriter, r *http.Request, status int, b []byte) {
	w.Header().Add("Vary", "Accept-Encoding")
	if len(b) >= minGzip && acceptsGzip(r) {
		var z bytes.Buffer
		gz, _ := gzip.NewWriterLevel(&z, gzip.BestSpeed)
		_, _ = gz.Write(b)
		if gz.Close() == nil {
			w.Header().Set("Content-Encoding", "gzip")
			b = z.Bytes()
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// asset is one embedded static file, with its gzipped form.
type asset struct {
	contentType string
	plain, gz   []byte
}

// loadAssets reads every static file once and compresses it: they change
// only with the binary.
func loadAssets(files fs.FS) (map[string]asset, error) {
	out := map[string]asset{}
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		var z bytes.Buffer
		gz, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
		_, _ = gz.Write(b)
		if err := gz.Close(); err != nil {
			return err
		}
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = "application/octet-stream"
		}
		out[p] = asset{contentType: ct, plain: b, gz: z.Bytes()}
		return nil
	})
	return out, err
}

// handleStatic serves the embedded stylesheet, scripts and licences. They
// may be cached for a while: they change only with the binary.
func (c *Console) handleStatic(w http.ResponseWriter, r *http.Request) {
	a, ok := c.assets[strings.TrimPrefix(r.URL.Path, "/ui/static/")]
	if !ok {
		c.renderUnrouted(w, r, http.StatusNotFound, "Not found: "+r.URL.Path)
		return
	}
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Add("Vary", "Accept-Encoding")
	b := a.plain
	if acceptsGzip(r) && len(a.gz) < len(a.plain) {
		w.Header().Set("Content-Encoding", "gzip")
		b = a.gz
	}
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}
