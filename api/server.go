package api

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/ops"
)

// Config configures the HTTP server.
type Config struct {
	// Addr is the listen address. Required.
	Addr string
	// Checks are the readiness checks behind /readyz. Optional.
	Checks []Check
	// Gatherer serves /metrics. Optional; default prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
	// Logger is optional; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the API's own metrics. Optional.
	Registerer prometheus.Registerer

	// Ops serves the /api/v1 routes: every read and action, with its
	// rules. Optional: without it only the health and metrics endpoints
	// are served.
	Ops *ops.Service
	// Auth authenticates /api/v1 requests. Required with Ops. When it
	// holds no token, New refuses any Addr that is not loopback.
	Auth *auth.Authenticator
	// MaxBodyBytes bounds a request body; larger ones get 413. Optional;
	// default 1 MiB.
	MaxBodyBytes int64
	// ImportMaxBodyBytes bounds the body of an import, before and after
	// gzip. Optional; default 1 GiB.
	ImportMaxBodyBytes int64
	// Mount adds handlers beside the API's routes (the web console under
	// /ui/). Optional.
	Mount map[string]http.Handler
	// TLS serves HTTPS with this configuration (its GetCertificate reloads
	// the certificate: package tlsconf). Optional; nil serves plain HTTP.
	TLS *tls.Config
}

// Default request body limits.
const (
	MaxBodyBytesDefault       = 1 << 20
	ImportMaxBodyBytesDefault = 1 << 30
)

func (c *Config) validate() error {
	if c.Addr == "" {
		return errors.New("api: Addr is required")
	}
	if c.Ops != nil && c.Auth == nil {
		return errors.New("api: Auth is required with Ops")
	}
	if c.MaxBodyBytes < 0 || c.ImportMaxBodyBytes < 0 {
		return fmt.Errorf("api: MaxBodyBytes (%d) and ImportMaxBodyBytes (%d) must be >= 0", c.MaxBodyBytes, c.ImportMaxBodyBytes)
	}
	if c.Auth != nil && c.Auth.Open() && !isLoopback(c.Addr) {
		return fmt.Errorf("api: no API token is configured, so the API would accept anyone: refusing to listen on %s; "+
			"listen on a loopback address (127.0.0.1:8080) or set DLQ_ADMIN_TOKEN / api.tokens", c.Addr)
	}
	return nil
}

// With no token configured every local caller is an admin, and a web page
// open in the developer's browser is a local caller too: a form it submits
// to 127.0.0.1 (a cross-site request), or a name of its own it points at
// 127.0.0.1 (DNS rebinding, which also lets it read the answers, and sign
// in to the console), would act as one. So then every request must name a
// loopback host (openHostRefusal, for every path), and a browser's API
// request must come from the API's own origin (openBrowserRefusal; the
// console checks origins itself).

// withOpenModeHost refuses, when no token is configured, a request whose
// Host is not a loopback name.
func (s *Server) withOpenModeHost(next http.Handler) http.Handler {
	if s.cfg.Auth == nil || !s.cfg.Auth.Open() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !isLoopback(net.JoinHostPort(strings.Trim(host, "[]"), "0")) {
			writeError(w, r, http.StatusForbidden, "forbidden", fmt.Sprintf("Host %q is not a loopback name: with no API token configured "+
				"only requests to 127.0.0.1, ::1 or localhost are served; set DLQ_ADMIN_TOKEN to serve others", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// openBrowserRefusal says why an API request is refused when no token is
// configured, "" when it is served.
func openBrowserRefusal(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "none", "same-origin":
	default:
		return fmt.Sprintf("a %s request from a web page: with no API token configured the API serves only its own origin and clients that are not browsers; set DLQ_ADMIN_TOKEN", site)
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			return fmt.Sprintf("a request from the web page of origin %q: with no API token configured the API serves only its own origin and clients that are not browsers; set DLQ_ADMIN_TOKEN", o)
		}
	} else if o == "null" {
		return "a request from a page of no origin (a file, a sandbox): with no API token configured the API serves only its own origin and clients that are not browsers; set DLQ_ADMIN_TOKEN"
	}
	return ""
}

// isLoopback reports whether addr (host:port) only accepts local
// connections. An empty host means every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Server is dlq's HTTP server.
type Server struct {
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	http    *http.Server
	metrics http.Handler
}

// New builds the server and its routes.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, MaxBodyBytesDefault)
	cfg.ImportMaxBodyBytes = cmp.Or(cfg.ImportMaxBodyBytes, ImportMaxBodyBytesDefault)
	s := &Server{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()).With("component", "http"), mux: http.NewServeMux()}
	gatherer := cfg.Gatherer
	if gatherer == nil {
		gatherer = prometheus.DefaultGatherer
	}
	s.metrics = promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})
	for _, rt := range routeTable {
		if rt.needsOps() && cfg.Ops == nil {
			continue
		}
		s.mux.Handle(rt.pattern(), s.guard(rt))
	}
	for pattern, h := range cfg.Mount {
		s.mux.Handle(pattern, h)
	}
	s.http = &http.Server{
		Addr:              cfg.Addr,
		Handler:           s.withRequestID(s.withOpenModeHost(s.withRecover(s.withErrorEnvelope(s.mux)))),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         cfg.TLS,
		// A client that fails the TLS handshake is a log line each time;
		// routed through the server's logger at its level.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Handler returns the server's root handler (for tests).
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Listen binds the address, so a bad address fails at start, not later.
func (s *Server) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("api: listen on %s: %w", s.cfg.Addr, err)
	}
	return ln, nil
}

// Serve serves on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.log.Info("HTTP server listening", "addr", ln.Addr().String(), "tls", s.cfg.TLS != nil)
	if s.cfg.Auth != nil && s.cfg.Auth.Open() {
		s.log.Warn("NO API TOKEN CONFIGURED: every local caller is an anonymous admin; "+
			"set DLQ_ADMIN_TOKEN or api.tokens before exposing the API", "addr", ln.Addr().String())
	}
	serve := s.http.Serve
	if s.cfg.TLS != nil {
		serve = func(ln net.Listener) error { return s.http.ServeTLS(ln, "", "") }
	}
	if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("api: serve: %w", err)
	}
	return nil
}

// Shutdown stops accepting requests and waits for the ones in progress.
func (s *Server) Shutdown(ctx context.Context) error { return s.http.Shutdown(ctx) }

type ctxKey int

const requestIDKey ctxKey = iota

// RequestID returns the request id of r's context.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

func (s *Server) withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if id == "" || len(id) > 128 {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

// clientAddr is the address the request came from (the TCP peer; a
// proxy's X-Forwarded-For is not trusted, since any client can send one).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// writeError writes the documented error envelope.
func writeError(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	writeErrorReason(w, r, status, code, "", message)
}

// writeErrorReason is writeError with the error's reason (ops.Reason), a
// field of the error object left out when "".
func writeErrorReason(w http.ResponseWriter, r *http.Request, status int, code, reason, message string) {
	e := map[string]string{"code": code, "message": message}
	if reason != "" {
		e["reason"] = reason
	}
	writeJSON(w, r, status, map[string]any{
		"error":      e,
		"request_id": RequestID(r.Context()),
	})
}
