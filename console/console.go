package console

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/store"
)

//go:embed templates static
var assets embed.FS

// Sessions stores console sessions; *store.Store implements it.
type Sessions interface {
	CreateConsoleSession(ctx context.Context, idHash []byte, tokenName string, expires time.Time) error
	GetConsoleSession(ctx context.Context, idHash []byte) (store.ConsoleSession, error)
	DeleteConsoleSession(ctx context.Context, idHash []byte) error
}

// Config configures the console.
type Config struct {
	// Ops serves every read and action. Required.
	Ops Ops
	// Auth checks sign-in tokens and resolves sessions to principals.
	// Required: the API's own, so a token means the same on both.
	Auth *auth.Authenticator
	// Sessions stores sessions. Required.
	Sessions Sessions
	// SessionTTL is how long a sign-in lasts. Optional; default
	// SessionTTLDefault.
	SessionTTL time.Duration
	// RequestID returns the request id of a request's context (the API's
	// X-Request-Id), for audit rows and logs. Optional.
	RequestID func(context.Context) string
	// Logger is optional; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the console's metrics. Optional.
	Registerer prometheus.Registerer
}

// Path is where the console is served: mount it there (api.Config.Mount).
const Path = "/ui/"

// SessionTTLDefault is how long a sign-in lasts by default.
const SessionTTLDefault = 12 * time.Hour

func (c *Config) validate() error {
	switch {
	case c.Ops == nil:
		return errors.New("console: Ops is required")
	case c.Auth == nil:
		return errors.New("console: Auth is required")
	case c.Sessions == nil:
		return errors.New("console: Sessions is required")
	case c.SessionTTL < 0:
		return errors.New("console: SessionTTL must not be negative")
	}
	return nil
}

// Console is the web console's handler, served under /ui/.
type Console struct {
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	pages   *pages
	assets  map[string]asset
	signIns *prometheus.CounterVec
}

// New builds the console.
func New(cfg Config) (*Console, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.SessionTTL = cmp.Or(cfg.SessionTTL, SessionTTLDefault)
	if cfg.RequestID == nil {
		cfg.RequestID = func(context.Context) string { return "" }
	}
	reg := cfg.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	pg, err := parsePages()
	if err != nil {
		return nil, err
	}
	staticFS, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, err
	}
	files, err := loadAssets(staticFS)
	if err != nil {
		return nil, fmt.Errorf("console: load static files: %w", err)
	}
	c := &Console{
		cfg:    cfg,
		assets: files,
		log:    cmp.Or(cfg.Logger, slog.Default()).With("component", "console"),
		mux:    http.NewServeMux(),
		pages:  pg,
		signIns: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "dlq_console_sign_ins_total",
			Help: "Console sign-in attempts by result (ok, invalid_token, throttled).",
		}, []string{"result"}),
	}
	for _, r := range []string{"ok", "invalid_token", "throttled"} {
		c.signIns.WithLabelValues(r)
	}
	c.routes()
	return c, nil
}

// routes registers every page and action. GET pages need a session;
// POST actions need a session and its CSRF token (sign-in excepted).
func (c *Console) routes() {
	m := c.mux
	m.HandleFunc("GET /ui/{$}", c.handleRoot)
	m.HandleFunc("POST /ui/sign-in", c.handleSignIn)
	m.Handle("POST /ui/sign-out", c.action(c.handleSignOut))
	m.Handle("GET /ui/static/", http.HandlerFunc(c.handleStatic))

	m.Handle("GET /ui/messages", c.page(c.handleMessages))
	m.Handle("GET /ui/messages/{id}", c.page(c.handleMessage))
	m.Handle("GET /ui/messages/{id}/body", c.page(c.handleBody))
	m.Handle("GET /ui/groups", c.page(c.handleGroups))
	m.Handle("GET /ui/groups/{key}", c.page(c.handleGroup))
	m.Handle("GET /ui/replays", c.page(c.handleReplays))
	m.Handle("GET /ui/replays/{id}", c.page(c.handleReplay))
	m.Handle("GET /ui/jobs", c.page(c.handleJobs))
	m.Handle("GET /ui/audit", c.page(c.handleAudit))

	m.Handle("GET /ui/confirm", c.page(c.handleConfirm))
	m.Handle("POST /ui/confirm", c.action(c.handleConfirmPost))
	m.Handle("POST /ui/act", c.action(c.handleAct))
	m.Handle("POST /ui/replays/{id}/cancel", c.action(c.handleCancel))
	m.Handle("GET /ui/approvals", c.page(c.handleApprovals))
	m.Handle("GET /ui/approvals/{id}", c.page(c.handleApproval))
	m.Handle("POST /ui/approvals/{id}", c.action(c.handleDecide))
	m.Handle("GET /ui/messages/{id}/edit", c.page(c.handleEditForm))
	m.Handle("POST /ui/messages/{id}/edit", c.action(c.handleEdit))
}

// ServeHTTP serves /ui/ and everything below it, every answer with the
// security headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w.Header())
	h, pattern := c.mux.Handler(r)
	if pattern == "" {
		// The mux's own 404 and 405 are plain text; answer with a page.
		cw := &statusCapture{header: http.Header{}}
		h.ServeHTTP(cw, r)
		if allow := cw.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		if cw.status >= 300 && cw.status < 400 {
			http.Redirect(w, r, cw.header.Get("Location"), cw.status)
			return
		}
		status := cmp.Or(cw.status, http.StatusNotFound)
		c.renderUnrouted(w, r, status, http.StatusText(status)+": "+r.Method+" "+r.URL.Path)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// statusCapture records what the mux's fallback handler would answer.
type statusCapture struct {
	header http.Header
	status int
}

func (s *statusCapture) Header() http.Header { return s.header }
func (s *statusCapture) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return len(b), nil
}
func (s *statusCapture) WriteHeader(code int) { s.status = code }

// contentSecurityPolicy allows scripts, styles, images and requests from
// the console's own origin only, with no inline script or style, no
// plugin, no <base> and no framing. Message values are inert text in the
// page; if one ever escaped html/template, this still would not run it.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

func setSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}
